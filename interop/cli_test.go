package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The mcpsync command, built once from this module, against a TypeScript
// SDK server from npm over stdio.

// buildCLI builds the command from this module into dir.
func buildCLI(t *testing.T, dir string) string {
	t.Helper()
	src, err := filepath.Abs(filepath.Join("..", "cmd", "mcpsync"))
	require.NoError(t, err)
	bin := filepath.Join(dir, "mcpsync")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	out, err := exec.Command("go", "build", "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return bin
}

// runCLI runs the command with args and returns its JSON lines.
func runCLI(t *testing.T, bin string, args ...string) (int, []map[string]any, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var lines []map[string]any
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "a JSON line: %s", sc.Text())
		lines = append(lines, m)
	}
	return code, lines, stderr.String()
}

func TestCLIAgainstEverythingServer(t *testing.T) {
	t.Parallel()
	s := everything2025.server(t) // skips without Node.js
	server := append([]string{"--", s.command}, s.args...)
	bin := buildCLI(t, t.TempDir())

	t.Run("scan", func(t *testing.T) {
		code, lines, stderr := runCLI(t, bin, append([]string{"scan", "--json", "--templates=false"}, server...)...)
		require.Equal(t, 0, code, stderr)
		var catalogs []map[string]any
		for _, l := range lines {
			if l["event"] == "scan" {
				catalogs = append(catalogs, l)
			}
		}
		require.NotEmpty(t, catalogs, "the catalog is printed: %v", lines)
		raw, err := json.Marshal(catalogs)
		require.NoError(t, err)
		assert.Contains(t, string(raw), `"SNAPSHOT_UNPROVEN"`, "two passes over a server without the extension")
		assert.NotContains(t, string(raw), `"SNAPSHOT_PROVEN"`)
	})
	t.Run("read", func(t *testing.T) {
		code, lines, stderr := runCLI(t, bin, append([]string{"read", "test://static/resource/1", "--json"}, server...)...)
		require.Equal(t, 0, code, stderr)
		raw, err := json.Marshal(lines)
		require.NoError(t, err)
		assert.Contains(t, string(raw), `"versionReceipt.v1"`)
		assert.Contains(t, string(raw), `"ACCEPTED"`)
	})
	t.Run("watch", func(t *testing.T) {
		// The server notifies its subscribed resources every 10 s, although
		// its subscribe fails for a client without sampling: the URI polls,
		// and the notification still triggers a fenced read.
		code, lines, stderr := runCLI(t, bin, append([]string{"watch", "--uri", "test://static/resource/1", "--duration", "12s", "--json"}, server...)...)
		require.Equal(t, 0, code, stderr)
		require.NotEmpty(t, lines)
		assert.Equal(t, "summary", lines[len(lines)-1]["event"])
		triggers := map[any]int{}
		for _, l := range lines {
			if l["event"] == "version" {
				triggers[l["trigger"]]++
			}
		}
		assert.NotZero(t, triggers["initial"], "the first read: %v", lines)
		assert.NotZero(t, triggers["notification"], "a read the server's notification triggered: %v", lines)
	})
	t.Run("usage", func(t *testing.T) {
		code, _, stderr := runCLI(t, bin, "read")
		assert.Equal(t, 2, code)
		assert.NotEmpty(t, stderr)
	})
}
