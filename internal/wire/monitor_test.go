package wire

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A late answer is told from an unknown id however many requests ended
// since it was abandoned: it is dropped quietly, and the request in flight
// goes on.
func TestLateAnswerAfterManyRequests(t *testing.T) {
	var faults []error
	mon := NewMonitor(Limits{}, PlainFaults{}, func(err error) { faults = append(faults, err) })
	for i := 1; i <= 1000; i++ {
		_, finish := begun(mon, context.Background(), fmt.Sprintf("int64:%d", i), "resources/read")
		require.NoError(t, finish())
	}
	_, finish := begun(mon, context.Background(), "string:mcpsync-ping-1", "ping")
	require.NoError(t, finish())
	ctx, finish := begun(mon, context.Background(), "int64:1001", "resources/read")
	defer finish()

	for _, id := range []string{`1`, `500`, `1000`, `"mcpsync-ping-1"`} {
		assert.False(t, mon.inspect([]byte(`{"jsonrpc":"2.0","id":`+id+`,"result":{}}`)), id)
	}
	assert.Empty(t, faults, "late answers are no fault")
	assert.NoError(t, ctx.Err(), "the request in flight goes on")

	for _, id := range []string{`1002`, `"mcpsync-ping-2"`, `"1"`, `-1`, `01`, `"other"`} {
		assert.False(t, mon.inspect([]byte(`{"jsonrpc":"2.0","id":`+id+`,"result":{}}`)), id)
	}
	assert.Len(t, faults, 6, "each unknown id is a fault")
	assert.ErrorIs(t, context.Cause(ctx), &MessageError{Fault: FaultUnknownID})
}

func TestSplitID(t *testing.T) {
	for id, want := range map[string]struct {
		prefix string
		n      uint64
		ok     bool
	}{
		"int64:17":                  {"int64:", 17, true},
		"string:mcpsync-ping-3":     {"string:mcpsync-ping-", 3, true},
		"int64:0":                   {"int64:", 0, true},
		"int64:007":                 {"", 0, false},
		"string:abc":                {"", 0, false},
		"int64:1234567890123456789": {"", 0, false},
	} {
		prefix, n, ok := splitID(id)
		assert.Equal(t, want.ok, ok, id)
		if want.ok {
			assert.Equal(t, want.prefix, prefix, id)
			assert.Equal(t, want.n, n, id)
		}
	}
}

// begun begins a request on m and returns its context and its finish.
func begun(m *Monitor, ctx context.Context, id, method string) (context.Context, func() error) {
	c := m.begin(ctx, id, method)
	return c, func() error { return m.finish(c) }
}

// A request in flight is keyed as mcp-go keys its answer
// (transport.JSONRPCRequest.ID.String()), whatever the id's type.
func TestRequestKeyIsTheIDAsMCPGoSpellsIt(t *testing.T) {
	for _, v := range []any{int64(0), int64(7), int64(100), int64(-42), int64(math.MaxInt64), int64(math.MinInt64),
		"mcpsync-ping-3", "", float64(12), 1.5, nil} {
		id := mcp.NewRequestId(v)
		assert.Equal(t, id.String(), requestKey(id), "%T %v", v, v)
	}
}

// The answer to a request in flight is judged without an allocation: the
// read path pays for its limits in time only.
func TestAnAnswerInFlightIsJudgedWithoutAllocating(t *testing.T) {
	mon := NewMonitor(Limits{ReadBytes: 1 << 20, ReadItems: 10, Depth: 64}, PlainFaults{}, nil)
	_, finish := begun(mon, context.Background(), requestKey(mcp.NewRequestId(int64(123456))), "resources/read")
	defer finish()
	answer := []byte(`{"jsonrpc":"2.0","id":123456,"result":{"contents":[{"uri":"file:///a.md","mimeType":"text/plain","text":"hello"}]}}` + "\n")
	allocs := testing.AllocsPerRun(100, func() {
		if !mon.inspect(answer) {
			t.Fatal("the answer was refused")
		}
	})
	assert.Zero(t, allocs, "allocations to judge one answer")
}
