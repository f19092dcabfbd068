package boltledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/internal/crashtest"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Environment of the subscribing worker: its ledger file and the run it is.
const (
	envSubscribeLedger = "MCPSYNC_CRASH_SUBSCRIBE_LEDGER"
	envSubscribeRun    = "MCPSYNC_CRASH_SUBSCRIBE_RUN"
)

// subscribeURIs is how many URIs the subscribing worker subscribes, in
// one SubscribeAll: more than the committer puts in one transaction, so
// that their first subscriptions take several.
const subscribeURIs = 1500

// subscribeSubject is the subscribing worker's subject.
const subscribeSubject = "user:subscriber"

func subscribeURI(i int) string { return fmt.Sprintf("file:///crash/subscribe/%04d.md", i) }

// TestCrashSubscribeAllWorker is not a test: run by TestCrashSubscribeAll
// as a child process, it resumes what the ledger left open, subscribes
// every URI with one SubscribeAll, announcing each URI a subscribe request
// names before the request leaves, and waits for their first reads,
// until it is killed or its stdin ends.
func TestCrashSubscribeAllWorker(t *testing.T) {
	path := os.Getenv(envSubscribeLedger)
	if path == "" {
		t.Skip("run by TestCrashSubscribeAll")
	}
	run, _ := strconv.Atoi(os.Getenv(envSubscribeRun))
	ctx, stop := untilStdinEnds()
	defer stop(nil)
	if err := subscribeWorker(ctx, path, run); err != nil && !errors.Is(context.Cause(ctx), errStopped) {
		fmt.Printf("error %v\n", err)
		os.Exit(3)
	}
	fmt.Println("stopped")
}

func subscribeWorker(ctx context.Context, path string, run int) (err error) {
	srv := mcpsynctest.NewServer(nil)
	uris := make([]string, subscribeURIs)
	for i := range uris {
		uris[i] = subscribeURI(i)
		srv.Set(uris[i], "text/plain", "text of "+uris[i])
	}
	l, err := boltledger.Open(path, &boltledger.Options{Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	if err != nil {
		return err
	}
	// Odd runs subscribe by resources/subscribe, even ones by a listen
	// stream.
	version := ""
	if run%2 == 1 {
		version = "2025-11-25"
	}
	var out sync.Mutex
	dial := func(context.Context) (transport.Interface, error) {
		return &announcing{Interface: srv.NewInProcessTransport(), out: &out}, nil
	}
	c, err := mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Engine: e, Subject: subscribeSubject, ProtocolVersion: version})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, c.Close()) }()
	if _, err := c.SubscribeAll(ctx, uris); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, workerWait)
	defer cancel()
	if err := c.WaitForSync(wctx); err != nil {
		return fmt.Errorf("WaitForSync: %w", err)
	}
	out.Lock()
	fmt.Println("synced")
	out.Unlock()
	<-ctx.Done()
	return nil
}

// announcing is a transport that announces, before a subscribe request
// leaves, each URI it names.
type announcing struct {
	transport.Interface
	out *sync.Mutex // serializes the announcements
}

func (a *announcing) SendRequest(ctx context.Context, req transport.JSONRPCRequest) (*transport.JSONRPCResponse, error) {
	var uris []string
	raw, _ := json.Marshal(req.Params)
	switch req.Method {
	case string(mcp.MethodResourcesSubscribe):
		var p mcp.SubscribeParams
		_ = json.Unmarshal(raw, &p)
		uris = []string{p.URI}
	case string(mcp.MethodSubscriptionsListen):
		var p mcp.SubscriptionsListenParams
		_ = json.Unmarshal(raw, &p)
		uris = p.Notifications.ResourceSubscriptions
	}
	if len(uris) > 0 {
		a.out.Lock()
		for _, uri := range uris {
			fmt.Printf("subscribing %s\n", uri)
		}
		a.out.Unlock()
	}
	return a.Interface.SendRequest(ctx, req)
}

// Crash while subscribing: a worker subscribes fifteen hundred new URIs in
// one SubscribeAll, whose first subscriptions are written in batches of
// many URIs each, and is killed with SIGKILL at a random point: between
// the batches, as the requests of the written ones leave, or as their
// first reads are accepted. Each run resumes what the last left open and
// subscribes all again, alternating the protocol eras. After each kill,
// every URI a subscribe request named before the kill is in the file as
// a subscription its next run resumes: each was written before its
// request left. The last run, stopped once synced, has every URI open
// with its first read.
func TestCrashSubscribeAll(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	kills := crashtest.Kills(10)
	path := filepath.Join(t.TempDir(), "worker.db")
	rng := rand.New(rand.NewPCG(17, uint64(time.Now().UnixNano())))
	for run := range kills + 1 {
		label := fmt.Sprintf("run %d", run)
		w := crashtest.Start(t, "TestCrashSubscribeAllWorker", envSubscribeLedger+"="+path, envSubscribeRun+"="+strconv.Itoa(run))
		var ev []string
		if run < kills {
			ev = w.Kill(t, w.Await(t, label, 1+rng.IntN(subscribeURIs)))
			t.Logf("%s: killed after %q", label, crashtest.Last(ev))
		} else {
			ev = w.Stop(t, label, w.AwaitLine(t, label, "synced"))
		}
		resumable := resumableIn(t, path)
		for _, line := range ev {
			if uri, ok := strings.CutPrefix(line, "subscribing "); ok {
				_, written := resumable[uri]
				require.True(t, written, "%s: %s was asked for before its subscription was written", label, uri)
			}
		}
		if run == kills {
			assert.Len(t, resumable, subscribeURIs, "%s: every URI is subscribed", label)
			for uri, sub := range resumable {
				assert.NotZero(t, sub.Watermark, "%s: %s was read", label, uri)
			}
		}
	}
}

// resumableIn returns the subscriptions the ledger file at path holds open
// for the subscribing worker's subject, by URI: those its next run resumes.
func resumableIn(t *testing.T, path string) map[string]mcpsync.Subscription {
	t.Helper()
	l, done := openFile(t, path)
	defer done()
	e, err := mcpsync.NewEngine(&mcpsync.EngineOptions{Ledger: l})
	require.NoError(t, err)
	out := map[string]mcpsync.Subscription{}
	for sub, err := range e.ResumableSubscriptions() {
		require.NoError(t, err)
		if sub.Subject == subscribeSubject {
			out[sub.URI] = sub
		}
	}
	return out
}
