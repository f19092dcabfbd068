package mcpsync_test

import (
	"bufio"
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The README promises peak heap within twice MaxMessageBytes plus 16 MiB
// (mcpsynctest.HeapSlack) for every hostile scenario. With the content key
// spelled "cont\u0065nts" (see break12_keyescape_test.go) one message under
// MaxMessageBytes = 2 MiB carries ~58,000 content items past MaxReadItems
// (10,000), and decoding them takes several times the promised bound.
func TestBreak12EscapedKeyItemFloodExceedsHeapBound(t *testing.T) {
	const msgBytes = 2 << 20
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		p.mu.Lock()
		defer p.mu.Unlock()
		bw := bufio.NewWriter(p.out)
		fmt.Fprintf(bw, `{"jsonrpc":"2.0","id":%s,"result":{"cont\u0065nts":[`, req.ID)
		n := 64 // the envelope
		for i := 0; ; i++ {
			item := `{"uri":"` + b12URI + `","text":""}`
			if n+len(item)+8 > msgBytes {
				break
			}
			if i > 0 {
				bw.WriteByte(',')
				n++
			}
			bw.WriteString(item)
			n += len(item)
		}
		bw.WriteString("]}}\n")
		_ = bw.Flush()
	})
	lim := mcpsync.Limits{MaxMessageBytes: msgBytes}
	c := b12Connect(t, dial, mcpsync.ClientOptions{Limits: &lim})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)

	runtime.GC()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				done <- peak
				return
			case <-tick.C:
			}
		}
	}()
	out, err := c.Read(ctx, b12URI)
	close(stop)
	peak := <-done
	var items int
	if entry, lerr := c.Lookup(b12URI); lerr == nil {
		items = len(entry.Contents)
	}
	t.Logf("read: accepted=%v err=%v, %d items kept, peak heap %.1f MiB", out.Accepted, err, items, float64(peak)/(1<<20))
	bound := uint64(2*msgBytes + 16<<20)
	assert.ErrorIs(t, err, mcpsync.ErrTooManyReadItems)
	assert.LessOrEqual(t, peak, bound, "peak heap %d MiB over the README's bound of %d MiB", peak>>20, bound>>20)
}
