package wire

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/client/transport"
)

// framer is the reader mcp-go's stdio transport reads lines from. It reads
// each line itself, bounded by Limits.MessageBytes, and hands over only the
// lines the monitor lets through: mcp-go (v1.2.1) reads lines with
// bufio.Reader.ReadString, which grows without bound on a line that never
// ends, and drops what it cannot decode without a word.
//
// A line's message is the line without its terminator, "\n" or "\r\n": the
// terminator is framing, and only the message counts toward MessageBytes.
type framer struct {
	src  *bufio.Reader
	mon  *Monitor
	line []byte // the line being read; at most MessageBytes+2 long
	out  []byte // the rest of the line mcp-go has not read yet
	err  error

	// What the handshake's error is made of (Handshake), written by the
	// read loop: spoke, that a message was delivered; first, the start of
	// a line that is not JSON-RPC before any was; end, closed once the
	// stream ended (after every line before the end was judged).
	spoke atomic.Bool
	first atomic.Pointer[[]byte]
	end   chan struct{}
}

// junk returns the start of the first line that was not JSON-RPC, if the
// server wrote one before any message that was; nil otherwise.
func (f *framer) junk() []byte {
	if p := f.first.Load(); p != nil {
		return *p
	}
	return nil
}

// ended reports whether the server's output ended.
func (f *framer) ended() bool { return closed(f.end) }

// stop records the end of the server's output. The read loop calls it at
// most once: a framer with err set is never read again.
func (f *framer) stop(err error) {
	f.err = err
	close(f.end)
}

// judged records the verdict on a line: the first line that is not JSON at
// all, or not a JSON-RPC message, is kept while no message was delivered.
func (f *framer) judged(malformed bool, err error) {
	if err == nil {
		if !f.spoke.Load() {
			f.spoke.Store(true)
		}
		return
	}
	if !malformed || f.spoke.Load() || f.first.Load() != nil {
		return
	}
	first := bytes.Clone(bytes.TrimRight(f.line[:min(len(f.line), firstBytes)], "\r\n"))
	f.first.Store(&first)
}

func newFramer(r io.Reader, mon *Monitor) *framer {
	mon.watch()
	return &framer{src: bufio.NewReaderSize(r, 64<<10), mon: mon, end: make(chan struct{})}
}

func (f *framer) Read(p []byte) (int, error) {
	for len(f.out) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		f.next()
	}
	n := copy(p, f.out)
	f.out = f.out[n:]
	return n, nil
}

// messageLen returns the length of the message in f.line followed by
// chunk, which ends in "\n" when complete. An incomplete line is measured
// as if the next byte ended it, the shortest message it can still become.
func (f *framer) messageLen(chunk []byte, complete bool) int64 {
	n := len(f.line) + len(chunk)
	if complete {
		n-- // the "\n"
	}
	if n > 0 {
		last := n - 1
		c := byte(0)
		if last < len(f.line) {
			c = f.line[last]
		} else {
			c = chunk[last-len(f.line)]
		}
		if c == '\r' {
			n--
		}
	}
	return int64(n)
}

// fail ends the session: a stream that passed a bound or broke off mid-line
// cannot be resynchronized.
func (f *framer) fail(err error) {
	f.line = nil
	f.stop(f.mon.faults.Framing(err))
	f.mon.end(f.err)
}

// next reads one line and keeps it in out if the monitor lets it through.
func (f *framer) next() {
	// A large message is not kept pinned after it was delivered.
	if cap(f.line) > 1<<20 {
		f.line = nil
	}
	f.line = f.line[:0]
	limit := f.mon.lim.MessageBytes
	for {
		chunk, err := f.src.ReadSlice('\n')
		n := len(f.line) + len(chunk)
		if limit > 0 && int64(n) > limit+1 {
			// Past the bound with room for a "\r\n" terminator.
			if m := f.messageLen(chunk, err == nil); m > limit {
				f.fail(f.mon.faults.Limit(LimitMessageBytes, limit, m, ""))
				return
			}
		}
		if n > cap(f.line) {
			// Double, but never past the bound, so that the buffer and its
			// predecessor stay within twice the limit.
			size := max(2*cap(f.line), n, 64<<10)
			if limit > 0 {
				size = min(size, int(limit)+2)
			}
			grown := make([]byte, len(f.line), size)
			copy(grown, f.line)
			f.line = grown
		}
		f.line = append(f.line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if err == io.EOF && len(bytes.TrimSpace(f.line)) > 0 {
				// The server's output ended inside a message: what was sent
				// cannot be told from what was lost. (Another read error
				// comes of the transport closing, and says so itself.)
				f.fail(io.ErrUnexpectedEOF)
				return
			}
			f.stop(err)
			return
		}
		break
	}
	malformed, verdict := f.mon.inspectErr(f.line)
	f.judged(malformed, verdict)
	if verdict == nil {
		f.out = f.line
	}
}

// NewStream returns an mcp-go transport of newline-delimited JSON-RPC over r
// (the server's output) and w (its input), bounded by mon. Close closes both.
func NewStream(r io.ReadCloser, w io.WriteCloser, mon *Monitor) transport.Interface {
	f := newFramer(r, mon)
	return &stream{Stdio: transport.NewIO(f, w, nil), r: r, framer: f}
}

type stream struct {
	*transport.Stdio
	r      io.Closer
	framer *framer
}

// Close closes the server's input, then its output, which ends mcp-go's read
// loop even when the server does not end on its own.
func (s *stream) Close() error {
	err := s.Stdio.Close()
	return errors.Join(err, s.r.Close())
}

// processGrace is how long a server gets to exit after its stdin closed,
// and again after SIGTERM, before it is killed: the shutdown the MCP stdio
// transport describes.
const processGrace = 2 * time.Second

// NewProcess starts cmd and returns an mcp-go transport over its stdin and
// stdout, bounded by mon. The transport reports the server's exit to its
// connection-lost handler at once, as a Faults.Exit error (with the end of the
// server's stderr when cmd.Stderr was nil). Close closes stdin, waits
// processGrace for the process to exit, then sends SIGTERM and waits again,
// then kills it.
func NewProcess(cmd *exec.Cmd, mon *Monitor) (transport.Interface, error) {
	if cmd.Stdout != nil {
		return nil, errors.New("exec: Stdout already set")
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// The server's stdout is a pipe of the transport's own, not
	// cmd.StdoutPipe's, which Wait closes as soon as the server exits: a
	// line written just before the exit (a "not JSON-RPC" reason, a last
	// answer) would race the close and be lost.
	stdout, w, err := os.Pipe()
	if err != nil {
		_ = stdin.Close()
		return nil, err
	}
	cmd.Stdout = w
	var stderr *tail
	if cmd.Stderr == nil {
		stderr = &tail{}
		cmd.Stderr = stderr
	}
	if cmd.WaitDelay == 0 {
		// A helper the server started may hold its stderr after the server
		// exited; Wait must report the exit, not wait for the helper.
		cmd.WaitDelay = processGrace
	}
	err = cmd.Start()
	_ = w.Close() // the server's copy is the one that counts
	if err != nil {
		_ = stdout.Close()
		return nil, err
	}
	f := newFramer(stdout, mon)
	released, release := context.WithCancel(context.Background())
	p := &process{Stdio: transport.NewIO(f, stdin, nil), framer: f, released: released, release: release, group: leadsGroup(cmd), stdout: stdout, stderr: stderr, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
		p.mu.Lock()
		lost, closing := p.lost, p.closing
		p.mu.Unlock()
		if lost != nil && !closing {
			lost(p.exitErr(false))
		}
		// What the server wrote before it exited is read to the end, until
		// the transport is closed; a helper it started that still holds
		// its stdout is not waited for past processGrace.
		awaitBoth(p.released, f.end, nil)
		_ = stdout.Close()
	}()
	return p, nil
}

type process struct {
	*transport.Stdio
	framer *framer
	// released is done once Close or Abort began: nothing reads the
	// server's output after that.
	released context.Context
	release  context.CancelFunc
	group    bool // the server leads a process group of its own (OwnGroup)
	stdout   *os.File
	stderr   *tail // nil when the caller took the server's stderr
	cmd      *exec.Cmd
	exited   chan struct{}
	waitErr  error // set before exited closes
	once     sync.Once

	mu      sync.Mutex // protects lost and closing
	lost    func(error)
	closing bool
}

// exitErr returns the server's exit; only once exited is closed.
func (p *process) exitErr(beforeInitialize bool) error {
	wait := p.waitErr
	if errors.Is(wait, exec.ErrWaitDelay) {
		wait = nil // status 0; a helper held the server's stderr
	}
	var stderr string
	if p.stderr != nil {
		stderr = p.stderr.String()
	}
	return p.framer.mon.faults.Exit(wait, stderr, beforeInitialize)
}

// SetConnectionLostHandler sets the handler told of the server's exit while
// the transport is open (at once, if it has exited already).
func (p *process) SetConnectionLostHandler(handler func(error)) {
	p.mu.Lock()
	p.lost = handler
	closing := p.closing
	p.mu.Unlock()
	select {
	case <-p.exited:
		if !closing {
			handler(p.exitErr(false))
		}
	default:
	}
}

// Abort kills the server at once: the session is lost, and a dead or hung
// server gets no grace periods.
func (p *process) Abort() error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.release()
	err := p.Stdio.Close()
	p.once.Do(func() {
		p.signal(syscall.SIGKILL) // the server, and its group when it leads one
		<-p.exited
	})
	_ = p.stdout.Close() // ends the read loop, whoever else holds the pipe
	return err
}

// signal sends sig to the server, and to what it started when it leads a
// process group of its own.
func (p *process) signal(sig syscall.Signal) {
	if p.group {
		signalGroup(p.cmd.Process.Pid, sig)
		return
	}
	_ = p.cmd.Process.Signal(sig)
}

// endGroup kills what the server started and left running, once the server
// exited: the transport owns them as it owns the server.
func (p *process) endGroup() {
	if p.group {
		signalGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Close ends the session the way the MCP stdio transport says: stdin closed,
// then SIGTERM, then SIGKILL, each after processGrace. It returns nil for a
// server that exited when asked, and an error for one that had to be killed
// or that exited with a failure on its own.
func (p *process) Close() error {
	p.mu.Lock()
	p.closing = true
	p.mu.Unlock()
	p.release()
	err := p.Stdio.Close()
	p.once.Do(func() {
		wait := func() bool {
			timer := time.NewTimer(processGrace)
			defer timer.Stop()
			select {
			case <-p.exited:
				return true
			case <-timer.C:
				return false
			}
		}
		defer p.endGroup()
		if wait() {
			// ErrWaitDelay is a clean exit whose stderr a helper still
			// held when WaitDelay ran out: Wait returns it for status 0.
			if p.waitErr != nil && !errors.Is(p.waitErr, exec.ErrWaitDelay) {
				err = errors.Join(err, p.exitErr(false))
			}
			return
		}
		p.signal(syscall.SIGTERM)
		if wait() {
			return
		}
		p.signal(syscall.SIGKILL)
		<-p.exited
		err = errors.Join(err, fmt.Errorf("server process did not exit within %v of stdin closing and SIGTERM: killed", 2*processGrace))
	})
	_ = p.stdout.Close() // ends the read loop, whoever else holds the pipe
	return err
}
