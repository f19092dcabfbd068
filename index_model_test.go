package mcpsync_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// unindexed is a memory ledger seen only through the Ledger interface: an
// engine on it finds what revocations and new sessions visit by walking
// every record.
type unindexed struct{ ledger.Ledger }

// TestIndexedPassesEqualFullWalks runs the same random operations on two
// engines, one on a memory ledger (whose indexes tell a revocation and a new
// session which records to visit) and one on the same kind of ledger
// hidden behind the bare interface (so the engine walks every record), and
// requires every receipt and every subscription row to be the same.
func TestIndexedPassesEqualFullWalks(t *testing.T) {
	subjects := []string{alice, bob, "user:carol"}
	rapid.Check(t, func(rt *rapid.T) {
		clock := newClock()
		engines := [2]*mcpsync.Engine{}
		for i, l := range []ledger.Ledger{ledger.NewMemory(nil), unindexed{ledger.NewMemory(nil)}} {
			engines[i] = newEngine(t, &mcpsync.EngineOptions{Ledger: l, Now: clock.now})
		}
		both := func(f func(e *mcpsync.Engine) (any, error)) {
			a, errA := f(engines[0])
			b, errB := f(engines[1])
			require.Equal(rt, errA == nil, errB == nil, "errors %v and %v", errA, errB)
			require.Equal(rt, a, b)
		}
		rows := func(e *mcpsync.Engine) (any, error) {
			var out []mcpsync.Subscription
			for s, err := range e.Subscriptions() {
				if err != nil {
					return nil, err
				}
				s.Capabilities = ledger.CapabilityReceipt{} // names the engine
				out = append(out, s)
			}
			return out, nil
		}
		for range rapid.IntRange(1, 40).Draw(rt, "steps") {
			uri := fmt.Sprintf("file:///docs/%d.md", rapid.IntRange(0, 5).Draw(rt, "uri"))
			subject := rapid.SampledFrom(subjects).Draw(rt, "subject")
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0:
				both(func(e *mcpsync.Engine) (any, error) {
					if _, err := e.Subscribe(uri, subject); err != nil {
						return nil, err
					}
					_, err := e.Activate(uri, ledger.ModePush)
					return nil, err
				})
			case 1:
				body := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "body")
				both(func(e *mcpsync.Engine) (any, error) {
					tk, err := e.IssueTicket(uri, ledger.TriggerNotification)
					if err != nil {
						return nil, err
					}
					out, err := e.AcceptResourceVersion(tk, text(uri, body))
					return out.Version.Version, err
				})
			case 2:
				id := rapid.SampledFrom([]string{"x", "y"}).Draw(rt, "artifact")
				both(func(e *mcpsync.Engine) (any, error) {
					sub, err := e.Subscription(uri)
					if err != nil {
						return nil, err
					}
					r, err := e.Ledger().Load(t.Context(), sub.URI)
					if err != nil || r == nil || r.Current == nil {
						return nil, err
					}
					return nil, e.RecordDerived(ledger.DerivedArtifact{Index: "vectors", ArtifactID: id, Version: r.Current.Version})
				})
			case 3:
				both(func(e *mcpsync.Engine) (any, error) {
					if _, err := e.BeginClose(uri); err != nil {
						return nil, err
					}
					_, err := e.FinishClose(uri, false)
					return nil, err
				})
			case 4:
				both(func(e *mcpsync.Engine) (any, error) {
					c, err := e.BeginSession(mcpsync.SessionInfo{})
					return c.SessionGeneration, err
				})
			case 5:
				both(func(e *mcpsync.Engine) (any, error) { return e.RevokeSubject(subject) })
			}
			both(rows)
		}
	})
}
