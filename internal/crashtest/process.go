package crashtest

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Deadline bounds every wait of the parent on its worker.
const Deadline = 30 * time.Second

// Worker is a child process running one of the calling package's worker
// tests (the os/exec TestHelperProcess pattern). It reads its stdin until
// the parent closes it, and announces on stdout, one line each, the steps
// that committed.
type Worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer  // read only once the process was waited for
	lines  chan string   // closed at the end of stdout
	done   chan struct{} // closed when nobody reads lines any more
	waited bool
}

// Start runs the test named test of the test binary in a child process with
// env added to the parent's environment. The child is killed and waited for
// when t ends, whatever happened.
func Start(t *testing.T, test string, env ...string) *Worker {
	t.Helper()
	w := &Worker{lines: make(chan string), done: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0], "-test.run=^"+test+"$")
	w.cmd.Env = append(os.Environ(), env...)
	w.cmd.Stderr = &w.stderr
	stdout, err := w.cmd.StdoutPipe()
	require.NoError(t, err)
	w.stdin, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, w.cmd.Start())
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		defer close(w.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case w.lines <- sc.Text():
			case <-w.done:
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
	}()
	t.Cleanup(func() {
		if w.waited {
			return
		}
		_ = w.cmd.Process.Kill()
		close(w.done)
		<-eof
		_ = w.cmd.Wait()
	})
	return w
}

// Await returns the next n lines the worker announces. It fails the test
// when the worker reports an error, exits, or takes longer than Deadline;
// label names the run in those messages.
func (w *Worker) Await(t *testing.T, label string, n int) []string {
	t.Helper()
	return w.awaitUntil(t, label, func(got []string) bool { return len(got) >= n })
}

// AwaitLine returns what the worker announces up to and including line.
func (w *Worker) AwaitLine(t *testing.T, label, line string) []string {
	t.Helper()
	return w.awaitUntil(t, label, func(got []string) bool { return len(got) > 0 && got[len(got)-1] == line })
}

// AwaitMatch returns what the worker announces up to and including the
// first line match picks.
func (w *Worker) AwaitMatch(t *testing.T, label string, match func(line string) bool) []string {
	t.Helper()
	return w.awaitUntil(t, label, func(got []string) bool { return len(got) > 0 && match(got[len(got)-1]) })
}

func (w *Worker) awaitUntil(t *testing.T, label string, enough func([]string) bool) []string {
	t.Helper()
	deadline := time.NewTimer(Deadline)
	defer deadline.Stop()
	var got []string
	defer func() {
		if t.Failed() {
			t.Logf("%s announced:\n%s", label, strings.Join(got, "\n"))
		}
	}()
	for !enough(got) {
		select {
		case line, ok := <-w.lines:
			if !ok {
				err := w.cmd.Wait()
				w.waited = true
				t.Fatalf("%s: the worker exited on its own (%v) after %q\n%s", label, err, got, w.stderr.String())
			}
			require.False(t, strings.HasPrefix(line, "error"), "%s: %s", label, line)
			got = append(got, line)
		case <-deadline.C:
			t.Fatalf("%s: still waiting after %v; the worker announced %d lines, the last %q", label, Deadline, len(got), Last(got))
		}
	}
	return got
}

// Kill kills the worker with SIGKILL and returns got with what it announced
// before it died: those steps committed too.
func (w *Worker) Kill(t *testing.T, got []string) []string {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL))
	for line := range w.lines {
		got = append(got, line)
	}
	err := w.cmd.Wait()
	w.waited = true
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the worker was killed")
	return got
}

// Stop closes the worker's stdin, which asks it to finish cleanly, and
// returns got with what it announced until it exited. The worker must exit
// with status 0 within Deadline.
func (w *Worker) Stop(t *testing.T, label string, got []string) []string {
	t.Helper()
	require.NoError(t, w.stdin.Close())
	deadline := time.NewTimer(Deadline)
	defer deadline.Stop()
	for open := true; open; {
		select {
		case line, ok := <-w.lines:
			if open = ok; ok {
				require.False(t, strings.HasPrefix(line, "error"), "%s: %s", label, line)
				got = append(got, line)
			}
		case <-deadline.C:
			t.Fatalf("%s: the worker did not stop within %v; it announced %q last", label, Deadline, Last(got))
		}
	}
	err := w.cmd.Wait()
	w.waited = true
	require.NoError(t, err, "%s: the worker's exit; it announced %q last\n%s", label, Last(got), w.stderr.String())
	return got
}

// Last returns the last of lines, or "" when there is none.
func Last(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}
