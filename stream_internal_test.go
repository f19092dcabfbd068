package mcpsync

import (
	"errors"
	"fmt"
	"testing"
)

// A listen stream the server refuses before the passes of the URIs it
// carries asked for it (SubscribeAll names its URIs on the stream before
// their passes run) costs one URI its push, as a refusal does when passes
// wait on the stream: the others are carried by the next stream, so that
// k refusals cost k URIs and about 2k streams, however the asks were timed.
func TestAStreamRefusedBeforeAnyAskCostsOneURIItsPush(t *testing.T) {
	conn := &connection{wanted: map[string]bool{}, refused: map[string]streamRefusal{}, awaiting: map[string]streamAsk{}}
	for i := range 50 {
		conn.wantLocked(fmt.Sprintf("file:///docs/%02d.md", i))
	}
	s := &listenStream{uris: append([]string(nil), conn.want...)}
	marks := conn.refuseFirstLocked(s, errors.New("refused"))
	if len(marks) != 1 || len(conn.refused) != 1 {
		t.Fatalf("a refusal refused %d URIs (marked %v), want 1", len(conn.refused), marks)
	}
	if len(conn.want) != 49 {
		t.Errorf("%d URIs still wanted on the next stream, want 49", len(conn.want))
	}
}
