package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkMeasureRead measures the limits' walk of a read result, which
// every read pays before mcp-go decodes it.
func BenchmarkMeasureRead(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		result, err := json.Marshal(map[string]any{"contents": []map[string]any{
			{"uri": "file:///docs/a.md", "mimeType": "text/plain", "text": strings.Repeat("x", size)},
		}})
		if err != nil {
			b.Fatal(err)
		}
		name := "1KiB"
		if size == 1<<20 {
			name = "1MiB"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(result)))
			for b.Loop() {
				if _, n := measureRead(result); n != int64(size) {
					b.Fatal(n)
				}
			}
		})
	}
}

// BenchmarkInspect measures the monitor's judgement of one stdio message,
// the answer to a read, before mcp-go sees it.
func BenchmarkInspect(b *testing.B) {
	for _, size := range []int{1 << 10, 1 << 20} {
		msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 7, "result": map[string]any{"contents": []map[string]any{
			{"uri": "file:///docs/a.md", "mimeType": "text/plain", "text": strings.Repeat("x", size)},
		}}})
		if err != nil {
			b.Fatal(err)
		}
		name := "1KiB"
		if size == 1<<20 {
			name = "1MiB"
		}
		b.Run(name, func(b *testing.B) {
			mon := NewMonitor(Limits{MessageBytes: 4 << 20, Depth: 64, ReadBytes: 2 << 20, ReadItems: 100}, PlainFaults{}, nil)
			c := mon.begin(b.Context(), "int64:7", "resources/read")
			defer mon.finish(c)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if !mon.inspect(msg) {
					b.Fatal("refused")
				}
			}
		})
	}
}
