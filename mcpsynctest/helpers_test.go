package mcpsynctest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// legacy pins a client to the last protocol version with the initialize
// handshake.
var legacy = client.WithProtocolVersion(mcp.LATEST_LEGACY_PROTOCOL_VERSION)

// recorder collects the notifications a client receives.
type recorder struct {
	mu     sync.Mutex
	notes  []mcp.JSONRPCNotification
	signal chan struct{} // one token per notification, for tests outside synctest
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1000)} }

func (r *recorder) handle(n mcp.JSONRPCNotification) {
	r.mu.Lock()
	r.notes = append(r.notes, n)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

// waitUpdated waits, on real time, until n resources/updated notifications
// have arrived; for network tests, where synctest cannot see the goroutines.
func (r *recorder) waitUpdated(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for len(r.updated()) < n {
		select {
		case <-r.signal:
		case <-timeout:
			t.Fatalf("got %d resources/updated notifications, want %d", len(r.updated()), n)
		}
	}
}

// updated returns the URIs of the resources/updated notifications received,
// in order.
func (r *recorder) updated() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var uris []string
	for _, n := range r.notes {
		if n.Method == mcp.MethodNotificationResourceUpdated {
			uri, _ := n.Params.AdditionalFields["uri"].(string)
			uris = append(uris, uri)
		}
	}
	return uris
}

func (r *recorder) count(method string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := 0
	for _, n := range r.notes {
		if n.Method == method {
			c++
		}
	}
	return c
}

// connect starts and initializes an mcp-go client over a fault Transport
// around inner, and closes it when the test ends.
func connect(t *testing.T, inner transport.Interface, seed int64, opts ...client.ClientOption) (*client.Client, *Transport, *recorder) {
	t.Helper()
	tr := NewTransport(inner, seed)
	c := client.NewClient(tr, opts...)
	rec := newRecorder()
	c.OnNotification(rec.handle)
	ctx := context.Background()
	require.NoError(t, c.Start(ctx))
	t.Cleanup(func() { _ = c.Close() })
	_, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ClientInfo: mcp.Implementation{Name: "mcpsynctest", Version: "test"},
	}})
	require.NoError(t, err)
	return c, tr, rec
}

func read(ctx context.Context, c *client.Client, uri string) (string, error) {
	res, err := c.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: uri}})
	if err != nil {
		return "", err
	}
	if len(res.Contents) != 1 {
		return "", nil
	}
	text, _ := res.Contents[0].(mcp.TextResourceContents)
	return text.Text, nil
}

func subscribe(t *testing.T, c *client.Client, uris ...string) {
	t.Helper()
	for _, uri := range uris {
		require.NoError(t, c.Subscribe(context.Background(), mcp.SubscribeRequest{Params: mcp.SubscribeParams{URI: uri}}))
	}
}

// walk lists kind page by page, without mcp-go's cycle check, and returns
// each page's result.
func walk(t *testing.T, c *client.Client, maxPages int) []*mcp.ListResourcesResult {
	t.Helper()
	var pages []*mcp.ListResourcesResult
	var cursor mcp.Cursor
	for range maxPages {
		req := mcp.ListResourcesRequest{}
		req.Params.Cursor = cursor
		res, err := c.ListResourcesByPage(context.Background(), req)
		require.NoError(t, err)
		pages = append(pages, res)
		if res.NextCursor == "" {
			break
		}
		cursor = res.NextCursor
	}
	return pages
}

func uris(pages []*mcp.ListResourcesResult) []string {
	var out []string
	for _, p := range pages {
		for _, r := range p.Resources {
			out = append(out, r.URI)
		}
	}
	return out
}

func snapshotID(p *mcp.ListResourcesResult) any {
	if p.Meta == nil {
		return nil
	}
	return p.Meta.AdditionalFields[SnapshotIDKey]
}
