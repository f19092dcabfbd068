package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/mark3labs/mcp-go/client/transport"
)

// firstBytes is how much of a line that is not JSON-RPC the error that
// names it (Faults.Output) keeps.
const firstBytes = 64

// Handshake returns what made the handshake of tr fail with err when tr
// is, or wraps (Unwrap), a transport of NewProcess or NewStream that can
// tell: output that was not JSON-RPC before any that was (Faults.Output), a
// server that exited (Faults.Exit), or output that ended with nothing said
// (Faults.OutputClosed). It returns nil when it cannot tell.
//
// A server that is going (its output ended, it exited, or err is a write
// to its closed input) is judged once it is gone: its output read to the
// end and its exit in, until ctx ends and for processGrace at most. Its
// exit, the end of its output and the client's first write race; judged
// earlier, a server that wrote a line and exited could be told by the
// broken pipe, or by its exit without the line.
func Handshake(ctx context.Context, tr transport.Interface, err error) error {
	var f *framer
	var p *process
	Wraps(tr, func(tr transport.Interface) bool {
		switch t := tr.(type) {
		case *process:
			p, f = t, t.framer
		case *stream:
			f = t.framer
		}
		return f != nil
	})
	if f == nil {
		return nil
	}
	var exited <-chan struct{}
	if p != nil {
		exited = p.exited
	}
	if f.ended() || closed(exited) || closedInput(err) {
		awaitBoth(ctx, f.end, exited)
	}
	var exit error
	if p != nil && closed(exited) {
		exit = p.exitErr(!f.spoke.Load())
	}
	switch first := f.junk(); {
	case first != nil:
		return f.mon.faults.Output(first, exit)
	case exit != nil:
		return exit
	case f.ended() && !f.spoke.Load() && !errors.Is(f.err, os.ErrClosed):
		// The output ended, with nothing said, by the server's doing
		// (not the transport's close), and the server lives on.
		return f.mon.faults.OutputClosed()
	}
	return nil
}

// awaitBoth waits for a and b to close (a nil one counts as closed), until
// ctx ends and for processGrace at most.
func awaitBoth(ctx context.Context, a, b <-chan struct{}) {
	timer := time.NewTimer(processGrace)
	defer timer.Stop()
	for a != nil || b != nil {
		select {
		case <-a:
			a = nil
		case <-b:
			b = nil
		case <-ctx.Done():
			return
		case <-timer.C:
			return
		}
	}
}

// closed reports whether ch is closed; a nil ch is not.
func closed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// closedInput reports whether err is a write to a server's input that the
// server closed, as when it exited.
func closedInput(err error) bool {
	return errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, os.ErrClosed)
}

// tail keeps the last bytes written to it: a server's stderr, for the
// error that says why it exited.
type tail struct {
	mu  sync.Mutex // protects buf
	buf []byte
}

const tailBytes = 1 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= tailBytes {
		t.buf = append(t.buf[:0], p[len(p)-tailBytes:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// String returns what was kept, from its first whole character, without
// surrounding space.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string(bytes.TrimSpace(b))
}
