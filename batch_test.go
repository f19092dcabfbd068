package mcpsync_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// The calls for many URIs decide for each what the call for one decides,
// each on its own: a refusal refuses that URI only. They run on the memory
// ledger (one after another) and on a ledger written by compare-and-swap
// (at once).
func TestManyURIsAtOnceDecideEachOnItsOwn(t *testing.T) {
	for _, l := range []ledger.Ledger{ledger.NewMemory(nil), casLedger{ledger.NewMemory(nil)}} {
		t.Run(fmt.Sprintf("%T", l), func(t *testing.T) {
			e := newEngine(t, &mcpsync.EngineOptions{Ledger: l})
			uris := make([]string, 100)
			for i := range uris {
				uris[i] = fmt.Sprintf("file:///docs/many/%03d.md", i)
			}
			_, err := e.Subscribe(uris[7], bob)
			require.NoError(t, err)
			uris = append(uris, "not a uri")

			subs, errs := e.SubscribeAll(uris, alice)
			require.Len(t, subs, len(uris))
			for i, err := range errs {
				switch i {
				case 7:
					assert.ErrorIs(t, err, mcpsync.ErrForbidden, "subscribed for another subject in this session")
				case len(uris) - 1:
					assert.ErrorIs(t, err, mcpsync.ErrInvalidURI)
				default:
					require.NoError(t, err, uris[i])
					assert.Equal(t, mcpsync.StateSubscribing, subs[i].State)
					assert.Equal(t, alice, subs[i].Subject)
				}
			}

			acts := make([]mcpsync.Activation, 0, len(uris))
			for i, u := range uris[:len(uris)-1] {
				mode := mcpsync.ModePush
				if i%2 == 1 {
					mode = mcpsync.ModePoll
				}
				acts = append(acts, mcpsync.Activation{URI: u, Mode: mode, Reason: "why " + u, StalenessBound: time.Minute})
			}
			subs, errs = e.ActivateAll(acts)
			for i, err := range errs {
				require.NoError(t, err, uris[i])
				assert.Equal(t, mcpsync.StateActive, subs[i].State)
				assert.Equal(t, acts[i].Mode, subs[i].Mode)
				assert.Equal(t, acts[i].Reason, subs[i].ModeReason)
				assert.Equal(t, time.Minute.Milliseconds(), subs[i].StalenessBoundMs)
			}
			_, errs = e.ActivateAll(acts[:1])
			assert.ErrorIs(t, errs[0], mcpsync.ErrIllegalTransition, "activated twice")

			reads := e.RequestReads(uris, mcpsync.TriggerReconnect)
			require.Len(t, reads, len(uris))
			ids := map[uint64]bool{}
			for i, r := range reads[:len(uris)-1] {
				require.NoError(t, r.Err, uris[i])
				require.True(t, r.Send, uris[i])
				assert.Equal(t, mcpsync.TriggerReconnect, r.Ticket.Trigger)
				assert.False(t, ids[r.Ticket.RequestID], "request id %d handed out twice", r.Ticket.RequestID)
				ids[r.Ticket.RequestID] = true
			}
			assert.ErrorIs(t, reads[len(uris)-1].Err, mcpsync.ErrInvalidURI)
			again := e.RequestReads(uris[:1], mcpsync.TriggerReconnect)
			assert.False(t, again[0].Send, "a read in flight covers the request")
			assert.NoError(t, again[0].Err)

			out, err := e.FinishRead(reads[0].Ticket, mcpsync.NewReadResult([]mcpsync.Content{{URI: uris[0], MIMEType: "text/plain", Text: "v1"}}))
			require.NoError(t, err)
			assert.True(t, out.Changed())
		})
	}
}
