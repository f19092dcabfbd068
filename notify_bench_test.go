package mcpsync

import (
	"encoding/json"
	"testing"

	"github.com/mark3labs/mcp-go/mcp"
)

// BenchmarkNotificationDecode is what the client spends on a
// resources/updated notification, as the transport decoded it, before it
// reaches the engine: the URI and the listen stream it names. Its baseline
// is the bare type assertion of the URI.
func BenchmarkNotificationDecode(b *testing.B) {
	var n mcp.JSONRPCNotification
	wire := `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///docs/a.md","_meta":{"` +
		mcp.MetaKeySubscriptionID + `":"7"}}}`
	if err := json.Unmarshal([]byte(wire), &n); err != nil {
		b.Fatal(err)
	}
	b.Run("baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if uri, _ := n.Params.AdditionalFields["uri"].(string); uri == "" {
				b.Fatal("no uri")
			}
		}
	})
	b.Run("client", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if notifiedURI(n.Params.AdditionalFields) == "" || streamIDOf(n) != "7" {
				b.Fatal("decoded wrong")
			}
		}
	})
}
