package mcpsync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
)

// The wire layer measures a result by comparing raw member names
// ("contents", "text", "resources") byte for byte, but the decoders behind it
// (mcp-go's map[string]any parse of a read, encoding/json's case-insensitive
// struct decode of a page) unescape names and fold their case. A server that
// spells a member "cont\u0065nts", "t\u0065xt" or "Resources" passes every
// result bound: the limits then hold only up to MaxMessageBytes, and the
// item bounds not at all (about 1 KB of heap per decoded item).

const b12URI = "test://b12/doc"

func TestBreak12EscapedContentsKeyBypassesMaxReadItems(t *testing.T) {
	lim := mcpsync.Limits{MaxReadItems: 10}
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		items := make([]string, 11)
		for i := range items {
			items[i] = fmt.Sprintf(`{"uri":%q,"text":"x"}`, b12URI)
		}
		p.result(req.ID, `{"cont\u0065nts":[`+strings.Join(items, ",")+`]}`)
	})
	c := b12Connect(t, dial, mcpsync.ClientOptions{Limits: &lim})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)
	out, err := c.Read(ctx, b12URI)
	if err == nil && out.Accepted {
		entry, lerr := c.Lookup(b12URI)
		require.NoError(t, lerr)
		t.Logf("accepted a read of %d content items under MaxReadItems=10", len(entry.Contents))
	}
	require.ErrorIs(t, err, mcpsync.ErrTooManyReadItems, "11 content items under MaxReadItems=10")
}

func TestBreak12EscapedTextKeyBypassesMaxReadBytes(t *testing.T) {
	lim := mcpsync.Limits{MaxReadBytes: 1024}
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		p.result(req.ID, fmt.Sprintf(`{"contents":[{"uri":%q,"t\u0065xt":%q}]}`, b12URI, strings.Repeat("x", 64<<10)))
	})
	c := b12Connect(t, dial, mcpsync.ClientOptions{Limits: &lim})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := c.Subscribe(ctx, b12URI)
	require.NoError(t, err)
	out, err := c.Read(ctx, b12URI)
	if err == nil && out.Accepted {
		entry, lerr := c.Lookup(b12URI)
		require.NoError(t, lerr)
		t.Logf("accepted %d bytes of text under MaxReadBytes=1024", len(entry.Contents[0].Text))
	}
	require.ErrorIs(t, err, mcpsync.ErrReadTooLarge, "64 KiB of text under MaxReadBytes=1024")
}

func TestBreak12CaseFoldedResourcesKeyBypassesMaxPageItems(t *testing.T) {
	lim := mcpsync.Limits{MaxPageItems: 10}
	dial := b12Dialer(t, func(p *b12Peer, req b12Req) {
		items := make([]string, 50)
		for i := range items {
			items[i] = fmt.Sprintf(`{"uri":"test://b12/%d","name":"r"}`, i)
		}
		p.result(req.ID, `{"Resources":[`+strings.Join(items, ",")+`]}`)
	})
	c := b12Connect(t, dial, mcpsync.ClientOptions{Limits: &lim})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cat, err := c.Scan(ctx, mcpsync.KindResources)
	if err == nil {
		n := 0
		for range cat.Items() {
			n++
		}
		t.Logf("catalog of %d items from pages of 50 under MaxPageItems=10", n)
	}
	require.ErrorIs(t, err, mcpsync.ErrTooManyPageItems, "a page of 50 items under MaxPageItems=10")
}
