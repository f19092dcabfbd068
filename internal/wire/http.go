package wire

import (
	"io"
	"mime"
	"net/http"
)

// HTTPClient returns a client that sends through base (nil: the default
// transport) and bounds every response body by mon's MessageBytes: a JSON
// body as a whole, an event stream per event. A body over the bound fails
// its read with a *LimitError, which fails the request it answers and
// leaves the session (other requests, other streams) as it was.
func HTTPClient(base *http.Client, mon *Monitor) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	rt := c.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c.Transport = boundedTransport{rt: rt, mon: mon}
	return c
}

type boundedTransport struct {
	rt  http.RoundTripper
	mon *Monitor
}

func (t boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	limit := t.mon.lim.MessageBytes
	if err != nil || limit <= 0 || resp.Body == nil {
		return resp, err
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	resp.Body = &boundedBody{rc: resp.Body, mon: t.mon, limit: limit, events: mt == "text/event-stream"}
	return resp, nil
}

// boundedBody fails once a message passes the limit: the whole body, or for
// an event stream the bytes since the last blank line, which ends an event.
type boundedBody struct {
	rc     io.ReadCloser
	mon    *Monitor
	limit  int64
	events bool
	n      int64 // bytes of the current message
	prevNL bool  // the last byte was a newline
	err    error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	// Never hand over more than one byte past the limit, so the caller's
	// buffer stays bounded too.
	if room := b.limit + 1 - b.n; int64(len(p)) > room {
		p = p[:max(room, 1)]
	}
	n, err := b.rc.Read(p)
	if !b.events {
		b.n += int64(n)
	} else {
		for _, c := range p[:n] {
			switch {
			case c == '\r':
				continue
			case c == '\n' && b.prevNL:
				b.n = 0
			default:
				b.n++
			}
			b.prevNL = c == '\n'
		}
	}
	if b.n > b.limit {
		b.err = &LimitError{Limit: LimitMessageBytes, Max: b.limit, Observed: b.n}
		b.mon.report(b.err)
		return 0, b.err
	}
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }
