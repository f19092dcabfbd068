package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"
)

// The operator's side of a worker process: start it, follow its log, stop
// or kill it.

// timeout bounds every wait for the worker: one that times out fails the
// run. It is generous; a run takes a few seconds.
const timeout = time.Minute

// process is a worker the operator started: this program again, with the
// worker's configuration in its environment.
type process struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   io.Writer // where the worker's lines are shown

	mu    sync.Mutex // protects lines, ended and wake
	lines []string
	ended bool
	wake  chan struct{} // closed and replaced when lines or ended change
	shown int           // lines shown so far; the caller's goroutine only

	done chan struct{} // closed once the process was waited for
	err  error         // how it ended; set before done is closed
}

// start runs the worker. The process ends when its stdin does, so it
// cannot outlive this one, whatever ends this one.
func start(name string, cfg config, out io.Writer) (*process, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), configEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	p := &process{name: name, cmd: cmd, out: out, wake: make(chan struct{}), done: make(chan struct{})}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go p.follow(stdout)
	return p, nil
}

// follow collects the worker's lines until its stdout ends, then waits for
// the process.
func (p *process) follow(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		p.changed(func() { p.lines = append(p.lines, sc.Text()) })
	}
	err := p.cmd.Wait()
	p.changed(func() { p.ended = true })
	p.err = err
	close(p.done)
}

func (p *process) changed(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
	close(p.wake)
	p.wake = make(chan struct{})
}

// errEnded is await's error when the worker ended first.
var errEnded = errors.New("worker ended")

// await shows the worker's lines as they come until one satisfies ok, which
// may look at more than the line. It fails when the worker ends first
// (errEnded), or after timeout.
func (p *process) await(ctx context.Context, what string, ok func(line string) bool) error {
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		lines, ended, wake := p.lines[p.shown:], p.ended, p.wake
		p.mu.Unlock()
		for _, line := range lines {
			p.shown++
			fmt.Fprintf(p.out, "   %s| %s\n", p.name, line)
			if ok != nil && ok(line) {
				return nil
			}
		}
		if ended {
			<-p.done
			return fmt.Errorf("%w (%v) before %s", errEnded, p.err, what)
		}
		select {
		case <-wake:
		case <-deadline:
			return fmt.Errorf("%s: no %s within %v", p.name, what, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop asks the worker to stop (its stdin ends), shows the rest of its log
// and returns how it exited; one that does not stop in time is killed.
func (p *process) stop(ctx context.Context) error {
	_ = p.stdin.Close()
	if err := p.await(ctx, "its exit", nil); !errors.Is(err, errEnded) {
		p.kill()
		return err
	}
	return p.err
}

// kill ends the worker with SIGKILL (TerminateProcess on Windows) and
// waits for it. It is safe on a process that already ended.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}
