package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A server's stderr is kept to its last kilobyte, however it is written,
// and read from a whole character on.
func TestStderrTailKeepsTheLastKilobyte(t *testing.T) {
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"short", []string{"  cannot find module\n"}, "cannot find module"},
		{"one long write", []string{"x" + strings.Repeat("y", tailBytes)}, strings.Repeat("y", tailBytes)},
		{"many writes", []string{strings.Repeat("a", 600), strings.Repeat("b", 600)}, strings.Repeat("a", tailBytes-600) + strings.Repeat("b", 600)},
		// 1,201 bytes, of which the last 1,024 begin inside an "é".
		{"cut inside a character", []string{strings.Repeat("é", 600) + "a"}, strings.Repeat("é", 511) + "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl tail
			for _, w := range tc.writes {
				n, err := tl.Write([]byte(w))
				assert.NoError(t, err)
				assert.Equal(t, len(w), n)
			}
			assert.Equal(t, tc.want, tl.String())
		})
	}
}
