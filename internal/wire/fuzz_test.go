package wire

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"testing"
)

// FuzzDecode feeds arbitrary server output through the framer: no line over
// the message bound and none nested over the depth bound reaches mcp-go,
// everything that does is valid JSON, a refusal names its cause, and the
// measured sizes of a read agree with encoding/json's.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"a","text":"h\u00e9\ud83d\ude00\n"}]}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"a","blob":"aGVsbG8="}]}}` + "\n",
		`{"jsonrpc":"2.0","id":"1","result":[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":{` + "\n",
		`{"jsonrpc":"2.0","result":{}}` + "\n" + `{"jsonrpc":"2.0","id":99,"result":{}}` + "\n",
		`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"a"}}` + "\n",
		"garbage\n\n\r\n",
		`{"jsonrpc":"2.0","id":1,"result":{"resources":[{"uri":"a"},{"uri":"b"},{"uri":"c"}]}}`,
		`{"id":1,"result":"` + string(bytes.Repeat([]byte("x"), 300)) + `"}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":{"cont\u0065nts":[{"uri":"a","t\u0065xt":"x"},{},{},{},{}]}}` + "\n",
		`{"jsonrpc":"2.0","ID":2,"Result":{"Resources":[{"uri":"a"},{"uri":"b"},{"uri":"c"}]}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":{"contents":[{"uri":"a","TEXT":"` + string(bytes.Repeat([]byte{0xff}, 22)) + `"}]}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"method":"resources/read","result":{"contents":[]}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"id":2,"result":{}}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MessageBytes: 256, Depth: 16, ReadBytes: 64, ReadItems: 4, PageItems: 2}
		var faults []error
		mon := NewMonitor(lim, PlainFaults{}, func(err error) { faults = append(faults, err) })
		// Keys as idKey spells the JSON ids 1 and 2.
		for _, id := range []string{"int64:1", "int64:2"} {
			method := "resources/read"
			if id == "int64:2" {
				method = "resources/list"
			}
			_, finish := begun(mon, context.Background(), id, method)
			defer finish()
		}
		out, err := io.ReadAll(newFramer(bytes.NewReader(data), mon))
		if fe := (*FramingError)(nil); errors.As(err, &fe) &&
			!errors.Is(err, &LimitError{Limit: LimitMessageBytes}) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("framing error names neither the limit nor a broken line: %v", err)
		}
		if err != nil && mon.Err() == nil {
			t.Fatalf("the framer failed with %v, but the session goes on", err)
		}
		for _, line := range bytes.Split(out, []byte("\n")) {
			line = bytes.TrimRight(line, "\r")
			if len(line) == 0 {
				continue
			}
			if int64(len(line)) > lim.MessageBytes {
				t.Fatalf("delivered %d bytes over a bound of %d", len(line), lim.MessageBytes)
			}
			if !json.Valid(line) {
				t.Fatalf("delivered invalid JSON %q", line)
			}
			if d := maxDepth(line); d > lim.Depth {
				t.Fatalf("delivered depth %d over %d", d, lim.Depth)
			}
		}
		for _, err := range faults {
			var le *LimitError
			var me *MessageError
			var fe *FramingError
			if !errors.As(err, &le) && !errors.As(err, &me) && !errors.As(err, &fe) {
				t.Fatalf("fault of no known type: %T %v", err, err)
			}
		}
		// Sizes agree with encoding/json for what it can decode.
		var res struct {
			Contents []struct {
				Text *string `json:"text"`
			} `json:"contents"`
		}
		// The measure never falls short of the decoded result, whatever the
		// spelling of its member names (escaped, case-folded, repeated) or
		// the bytes of its strings (invalid UTF-8 decodes to U+FFFD).
		if maxDepth(data) < 100 && json.Unmarshal(data, &res) == nil {
			items, n := measureRead(data)
			var want int64
			for _, c := range res.Contents {
				if c.Text != nil {
					want += int64(len(*c.Text))
				}
			}
			if items < len(res.Contents) || n < want {
				t.Fatalf("measured %d items, %d bytes; encoding/json: %d items, %d bytes", items, n, len(res.Contents), want)
			}
		}
	})
}
