package mcpsynctest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/mcpsync/mcpsync"
)

// GoodURI is the one resource a hostile server answers honestly, so that a
// scenario can show the session survived.
const GoodURI = "test://hostile/good"

// HostileURI is the resource whose read a hostile server sabotages.
const HostileURI = "test://hostile/bad"

// Scenario is one way a hostile server over stdio tries to exhaust or
// confuse a client. Run it against a configuration with Run.
type Scenario struct {
	Name string
	// Want is what the refused call's error matches (errors.Is).
	Want error
	// Scan is set when the scenario sabotages resources/list rather than
	// resources/read.
	Scan bool
	// Fatal is set when the session cannot survive (a stdio framing
	// violation).
	Fatal bool
	// answer writes the hostile answer to a request with id.
	answer func(w io.Writer, id json.RawMessage)
	// flood, if set, is written once after the handshake.
	flood func(w io.Writer)
}

// Scenarios returns the hostile scenarios sized for lim (zero fields are
// the defaults): each passes exactly one limit, or breaks the protocol in one
// way.
func Scenarios(lim mcpsync.Limits) []Scenario {
	or := func(v, d int64) int64 {
		if v == 0 {
			return d
		}
		return v
	}
	readBytes := or(lim.MaxReadBytes, mcpsync.DefaultMaxReadBytes)
	readItems := or(int64(lim.MaxReadItems), mcpsync.DefaultMaxReadItems)
	pageItems := or(int64(lim.MaxPageItems), mcpsync.DefaultMaxPageItems)
	msgBytes := or(lim.MaxMessageBytes, mcpsync.DefaultMaxMessageBytes)
	depth := or(int64(lim.MaxDepth), mcpsync.DefaultMaxDepth)
	rate := or(int64(lim.MaxNotificationsPerSecond), mcpsync.DefaultMaxNotificationsPerSecond)
	return []Scenario{
		{Name: "read over MaxReadBytes", Want: mcpsync.ErrReadTooLarge, answer: func(w io.Writer, id json.RawMessage) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"`, id, HostileURI)
			writeRepeated(w, 'x', readBytes+1)
			io.WriteString(w, "\"}]}}\n")
		}},
		{Name: "content items over MaxReadItems", Want: mcpsync.ErrTooManyReadItems, answer: func(w io.Writer, id json.RawMessage) {
			bw := bufio.NewWriter(w)
			fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":{"contents":[`, id)
			for i := range readItems + 1 {
				if i > 0 {
					bw.WriteByte(',')
				}
				fmt.Fprintf(bw, `{"uri":%q,"text":""}`, HostileURI)
			}
			bw.WriteString("]}}\n")
			bw.Flush()
		}},
		{Name: "line that never ends", Want: mcpsync.ErrFramingViolation, Fatal: true, answer: func(w io.Writer, id json.RawMessage) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"`, id, HostileURI)
			writeRepeated(w, 'x', 4*msgBytes) // and no newline: fails once the client stops reading
		}},
		{Name: "nesting over MaxDepth", Want: mcpsync.ErrMessageTooDeep, answer: func(w io.Writer, id json.RawMessage) {
			n := max(100_000, 2*depth)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":`, id)
			writeRepeated(w, '[', n)
			writeRepeated(w, ']', n)
			io.WriteString(w, "}\n")
		}},
		{Name: "malformed JSON", Want: mcpsync.ErrMalformedMessage, answer: func(w io.Writer, id json.RawMessage) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":`+"\n", id)
		}},
		{Name: "not JSON at all", Want: mcpsync.ErrMalformedMessage, answer: func(w io.Writer, _ json.RawMessage) {
			io.WriteString(w, "hello from the server\n")
		}},
		{Name: "response with the wrong id", Want: mcpsync.ErrUnknownResponseID, answer: func(w io.Writer, _ json.RawMessage) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":987654321,"result":{"contents":[{"uri":%q,"text":"x"}]}}`+"\n", HostileURI)
		}},
		{Name: "response with no id", Want: mcpsync.ErrUnknownResponseID, answer: func(w io.Writer, _ json.RawMessage) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","result":{"contents":[{"uri":%q,"text":"x"}]}}`+"\n", HostileURI)
		}},
		{Name: "list page over MaxPageItems", Want: mcpsync.ErrTooManyPageItems, Scan: true, answer: func(w io.Writer, id json.RawMessage) {
			bw := bufio.NewWriter(w)
			fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":{"resources":[`, id)
			for i := range pageItems + 1 {
				if i > 0 {
					bw.WriteByte(',')
				}
				fmt.Fprintf(bw, `{"uri":"test://hostile/%d","name":"r"}`, i)
			}
			bw.WriteString("]}}\n")
			bw.Flush()
		}},
		{Name: "aliased URI in a listing", Scan: true, answer: func(w io.Writer, id json.RawMessage) {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"resources":[{"uri":"test://hostile/%%41bc","name":"a"},{"uri":"test://hostile/Abc","name":"a"}]}}`+"\n", id)
		}},
		{Name: "notification flood", Want: mcpsync.ErrNotificationRate, flood: func(w io.Writer) {
			bw := bufio.NewWriter(w)
			for range 10 * rate {
				fmt.Fprintf(bw, `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":%q}}`+"\n", GoodURI)
			}
			bw.Flush()
		}},
	}
}

func writeRepeated(w io.Writer, c byte, n int64) {
	chunk := []byte(strings.Repeat(string(c), 64<<10))
	for n > 0 {
		k := min(n, int64(len(chunk)))
		if _, err := w.Write(chunk[:k]); err != nil {
			return
		}
		n -= k
	}
}

// hostileServer answers the handshake and GoodURI honestly and everything
// about HostileURI (and resources/list) as the scenario says.
type hostileServer struct {
	sc  Scenario
	in  *io.PipeReader // the client's messages
	out *io.PipeWriter // to the client
	mu  sync.Mutex     // serializes writes to out
}

func (s *hostileServer) serve() {
	defer s.out.Close()
	r := bufio.NewReaderSize(s.in, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				URI             string `json:"uri"`
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"params"`
		}
		if json.Unmarshal(line, &req) != nil || req.ID == nil {
			continue
		}
		s.mu.Lock()
		switch {
		case req.Method == "initialize":
			fmt.Fprintf(s.out, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":%q,"capabilities":{"resources":{}},"serverInfo":{"name":"hostile","version":"1"}}}`+"\n", req.ID, req.Params.ProtocolVersion)
			if s.sc.flood != nil {
				go s.flood()
			}
		case req.Method == "resources/read" && req.Params.URI == GoodURI:
			fmt.Fprintf(s.out, `{"jsonrpc":"2.0","id":%s,"result":{"contents":[{"uri":%q,"text":"good"}]}}`+"\n", req.ID, GoodURI)
		case req.Method == "resources/read" && !s.sc.Scan, req.Method == "resources/list" && s.sc.Scan:
			s.sc.answer(s.out, req.ID)
		case req.Method == "ping":
			fmt.Fprintf(s.out, `{"jsonrpc":"2.0","id":%s,"result":{}}`+"\n", req.ID)
		default:
			fmt.Fprintf(s.out, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`+"\n", req.ID)
		}
		s.mu.Unlock()
	}
}

func (s *hostileServer) flood() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sc.flood(s.out)
}

// Dialer returns a dialer of a new hostile server of the scenario at every
// dial, over in-memory pipes, through mcpsync.StreamDialer, so the client's
// own limits apply as they would to a stdio process.
func (sc Scenario) Dialer() mcpsync.Dialer {
	return mcpsync.StreamDialer(func(context.Context) (io.ReadCloser, io.WriteCloser, error) {
		fromServer, toClient := io.Pipe()
		fromClient, toServer := io.Pipe()
		s := &hostileServer{sc: sc, in: fromClient, out: toClient}
		go s.serve()
		return fromServer, toServer, nil
	})
}

// heapSampler records the peak of live heap objects while it runs.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak uint64
}

func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{}), peak: heapBytes()}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			h.peak = max(h.peak, heapBytes())
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	return h.peak
}

// HeapSlack is the constant the peak heap of a scenario may exceed twice
// the configured MaxMessageBytes by: the client, mcp-go and the test itself.
const HeapSlack = 16 << 20

// Run runs the scenario against a client configured with opts (nil: the
// defaults; Principal and ProtocolVersion are filled in when empty) and
// checks that the refusal names its cause, that the peak heap stays within
// twice MaxMessageBytes plus HeapSlack, that the session survives unless the
// scenario is fatal, and that no goroutine outlives the client.
func (sc Scenario) Run(t *testing.T, opts *mcpsync.ClientOptions) {
	t.Helper()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	var o mcpsync.ClientOptions
	if opts != nil {
		o = *opts
	}
	if o.Subject == "" {
		o.Subject = "hostile-test"
	}
	if o.ProtocolVersion == "" {
		o.ProtocolVersion = "2025-11-25"
	}
	if o.RequestTimeout == 0 {
		// Long enough that a request failing by timeout, rather than with
		// its cause, fails the scenario's deadline below.
		o.RequestTimeout = time.Minute
	}
	msgBytes := int64(mcpsync.DefaultMaxMessageBytes)
	if o.Limits != nil && o.Limits.MaxMessageBytes != 0 {
		msgBytes = o.Limits.MaxMessageBytes
	}
	faults := make(chan error, 64)
	user := o.OnFault
	o.OnFault = func(err error) {
		if user != nil {
			user(err)
		}
		select {
		case faults <- err:
		default:
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	heap := startHeapSampler()
	c, err := mcpsync.Connect(ctx, sc.Dialer(), &o)
	require.NoError(t, err)
	defer c.Close()

	switch {
	case sc.flood != nil:
		select {
		case err := <-faults:
			require.ErrorIs(t, err, sc.Want)
		case <-ctx.Done():
			require.FailNow(t, "no fault reported before the deadline")
		}
	case sc.Scan:
		cat, err := c.Scan(ctx, mcpsync.KindResources)
		if sc.Want != nil {
			require.ErrorIs(t, err, sc.Want)
			require.NotErrorIs(t, err, context.DeadlineExceeded, "a cause, not a timeout")
		} else {
			require.NoError(t, err)
			assert.Equal(t, mcpsync.CatalogSnapshotUnproven, cat.Status)
			require.NotEmpty(t, cat.Scans)
			require.NotEmpty(t, cat.Scans[0].Faults)
			assert.Equal(t, mcpsync.FaultAliasedItem, cat.Scans[0].Faults[0].Fault)
		}
	default:
		_, err := c.Subscribe(ctx, HostileURI)
		require.NoError(t, err)
		_, err = c.Read(ctx, HostileURI)
		require.ErrorIs(t, err, sc.Want)
		require.NotErrorIs(t, err, context.DeadlineExceeded, "a cause, not a timeout")
	}
	peak := heap.Stop()
	assert.LessOrEqual(t, peak, uint64(2*msgBytes+HeapSlack), "peak heap %d MiB", peak>>20)
	t.Logf("%s: peak heap %.1f MiB (bound %d MiB)", sc.Name, float64(peak)/(1<<20), (2*msgBytes+HeapSlack)>>20)

	if sc.Fatal {
		require.ErrorIs(t, c.SessionErr(), mcpsync.ErrFramingViolation)
		return
	}
	require.NoError(t, c.SessionErr())
	_, err = c.Subscribe(ctx, GoodURI)
	require.NoError(t, err, "the session survives")
	_, err = c.Read(ctx, GoodURI)
	require.NoError(t, err, "the session survives")
}
