package mcpsync_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// Exports read the memory ledger's outbox without its lock while appends go
// on, and a consumer keeping up releases chunks that later appends reuse.
// Every entry an export hands out must still be the entry written under its
// number, field for field, whether it was kept packed against its
// subscription or whole: here entries of both shapes (versions of the
// current generation, and the revocations of derived artifacts, kept whole)
// are appended into reused chunks while exports run. Passes on the current
// code; run it with -race.
func TestBreak32ExportsWhileChunksAreReused(t *testing.T) {
	ctx := context.Background()
	clock := newClock()
	rec := &b32Recorder{Ledger: mcpsync.NewMemoryLedger(nil), want: map[uint64]string{}}
	e, err := mcpsync.NewEngine(&mcpsync.Options{Ledger: rec, Now: clock.now})
	require.NoError(t, err)
	_, err = e.BeginSession(mcpsync.SessionInfo{Capabilities: mcpsync.CapabilityReceipt{
		ProtocolVersion: "2025-11-25", Server: b32Servers[0], Resources: true, Subscribe: true}})
	require.NoError(t, err)

	var (
		mu      sync.Mutex
		exports [][]mcpsync.OutboxEntry
		kick    = make(chan struct{}, 1)
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for range kick {
			snap, err := rec.Export(ctx)
			if err != nil {
				panic(err)
			}
			mu.Lock()
			exports = append(exports, snap.Outbox)
			mu.Unlock()
		}
	}()

	for round := range 12 {
		uri := fmt.Sprintf("file:///docs/%d.md", round)
		subject := fmt.Sprintf("user:s%d", round)
		_, err := e.Subscribe(uri, subject)
		require.NoError(t, err)
		_, err = e.Activate(uri, mcpsync.ModePush)
		require.NoError(t, err)
		for i := range 300 {
			tk, err := e.IssueTicket(uri, mcpsync.TriggerNotification)
			require.NoError(t, err)
			out, err := e.AcceptResourceVersion(tk, text(uri, fmt.Sprintf("r%d-%d", round, i)))
			require.NoError(t, err)
			if round%3 != 2 { // every third round without exports: chunks are reused
				select {
				case kick <- struct{}{}: // an export, when none is under way
				default:
				}
			}
			if i%10 == 0 {
				// A consumer that keeps up, a little behind.
				st, err := rec.OutboxState(ctx)
				require.NoError(t, err)
				require.NoError(t, rec.Ack(ctx, mcpsync.DefaultConsumer, st.Last-uint64(round)))
			}
			if i%50 == 0 {
				require.NoError(t, e.RecordDerived(mcpsync.DerivedArtifact{Index: "search", ArtifactID: fmt.Sprintf("a%d", i), Version: out.Version.Version}))
			}
		}
		if round%2 == 1 {
			_, err = e.RevokeSubject(subject) // whole entries: artifacts
			require.NoError(t, err)
		}
	}
	close(kick)
	<-done

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, exports)
	for i, outbox := range exports {
		for _, en := range outbox {
			b, err := json.Marshal(en)
			require.NoError(t, err)
			require.Equal(t, rec.want[en.Seq], string(b), "export %d: entry %d is not the one written", i, en.Seq)
		}
	}
	entries, err := rec.Outbox(ctx, 0, 0)
	require.NoError(t, err)
	for _, en := range entries {
		b, err := json.Marshal(en)
		require.NoError(t, err)
		require.Equal(t, rec.want[en.Seq], string(b), "entry %d is not the one written", en.Seq)
	}
}
