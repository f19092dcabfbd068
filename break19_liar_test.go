package mcpsync_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// A server lists docURI but answers every read of it with the contents of
// another URI. Every read is refused (URI_MISMATCH), which is right; but
// Subscribe returns no error and WaitForSync — documented to return once
// every watched URI had "a first version, or a definite answer" — waits
// until its context ends, saying nothing of why. The quick start calls
// WaitForSync(ctx) with the caller's context: it hangs for ever. (A revoked
// principal had the same bug, fixed with ErrRevoked.)
func TestBreak19WaitForSyncHangsOnAServerThatAnswersForAnotherURI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := server.NewMCPServer("liar", "1.0.0", server.WithResourceCapabilities(true, true))
		srv.AddResource(mcp.NewResource(docURI, "a", mcp.WithMIMEType("text/markdown")),
			func(context.Context, mcp.ReadResourceRequest) ([]mcp.ResourceContents, error) {
				return []mcp.ResourceContents{mcp.TextResourceContents{URI: "file:///docs/secret.md", MIMEType: "text/markdown", Text: "not yours"}}, nil
			})
		c, err := mcpsync.Connect(t.Context(), func(context.Context) (transport.Interface, error) {
			return transport.NewInProcessTransport(srv), nil
		}, &mcpsync.ClientOptions{Subject: alice})
		require.NoError(t, err)
		defer func() { require.NoError(t, c.Close()) }()

		_, subErr := c.Subscribe(t.Context(), docURI)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		err = c.WaitForSync(ctx)
		_, lerr := c.Lookup(docURI)
		t.Logf("Subscribe: %v; Lookup: %v", subErr, lerr)
		require.NotErrorIs(t, err, context.DeadlineExceeded,
			"WaitForSync waited an hour for a URI whose every read the fence refuses, and said nothing of why")
	})
}
