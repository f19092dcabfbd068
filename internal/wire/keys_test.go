package wire

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Member names match as encoding/json matches a struct field: unescaped and
// case-folded, so that no respelling of a name passes a limit.
func TestKeyIs(t *testing.T) {
	for key, want := range map[string]bool{
		`contents`:      true,
		`cont\u0065nts`: true,
		`\u0063\u006f\u006e\u0074\u0065\u006e\u0074\u0073`: true,
		`Contents`:       true,
		`CONTENTS`:       true,
		"content\u017f":  true, // long s folds to s
		`content\u017f`:  true,
		`content`:        false,
		`contents `:      false,
		`cont\u0065nt`:   false,
		`contents\ud800`: false,
		`cont\/ents`:     false,
	} {
		assert.Equal(t, want, keyIs([]byte(key), "contents"), "%s", key)
	}
	assert.True(t, keyIs([]byte("\u212a"), "k"), "the Kelvin sign folds to k")
	assert.True(t, keyIs([]byte(`I\u0044`), "id"))
}

// A string's measure is its length as encoding/json decodes it.
func TestStrLen(t *testing.T) {
	for raw, want := range map[string]int64{
		`"abc"`:          3,
		`"\u00e9"`:       2,
		`"\ud83d\ude00"`: 4,
		`"\ud83d"`:       3,
		`"\ud83dx"`:      4,
		`"\ud83d\u0041"`: 4,
		"\"\xff\xfe\"":   6,
		"\"\xc3\xa9\"":   2,
		`"\n\\\""`:       3,
	} {
		assert.Equal(t, want, strLen([]byte(raw)), "%s", raw)
	}
}
