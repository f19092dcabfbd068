package mcpsync_test

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A stdio server that stops answering (SIGSTOP: its pipes stay open) is
// found by the heartbeat within PingEvery + PingTimeout. Healing must not
// then wait out the lost server's graceful shutdown (stdin close, then
// SIGTERM, each bounded by seconds) before it dials the successor: the
// lost process can be ended beside the new session. Today reconnect
// closes the old connection synchronously first, so the copy stays
// degraded about 4 s longer than the heartbeat needed to find the loss.
func TestHealDoesNotWaitForTheLostServersShutdown(t *testing.T) {
	var mu sync.Mutex // protects procs
	var procs []*exec.Cmd
	dial := mcpsync.StdioDialer(func(context.Context) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), docServerEnv+"=1", "GORACE=atexit_sleep_ms=0")
		mu.Lock()
		procs = append(procs, cmd)
		mu.Unlock()
		return cmd, nil
	})
	healed := make(chan mcpsync.ResourceVersion, 16)
	opts := &mcpsync.ClientOptions{
		Subject: "p", PingEvery: 100 * time.Millisecond, PingTimeout: 200 * time.Millisecond,
		Reconnect: mcpsync.ReconnectPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
		OnOutcome: func(o mcpsync.Outcome) {
			if o.Accepted && o.Version.Version.SessionGeneration > 1 {
				healed <- o.Version.Version
			}
		},
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c, err := mcpsync.Connect(ctx, dial, opts)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Subscribe(ctx, docURI)
	require.NoError(t, err)

	mu.Lock()
	stopped := procs[0].Process
	mu.Unlock()
	start := time.Now()
	require.NoError(t, stopped.Signal(syscall.SIGSTOP))
	select {
	case <-healed:
	case <-ctx.Done():
		t.Fatal("not healed")
	}
	took := time.Since(start)
	t.Logf("healed %v after SIGSTOP", took)
	// PingEvery + PingTimeout + a first reconnect + a read: well under 1.5 s.
	require.Less(t, took, 1500*time.Millisecond, "healing waited for the lost server's shutdown")
}
