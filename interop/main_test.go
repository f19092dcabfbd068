package interop

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// npmDir holds the manifest and lockfile of the npm servers; npm ci installs
// them into its node_modules, which git ignores.
const npmDir = "testdata/npm"

// npm is the state of the npm servers after TestMain's set-up.
var npm struct {
	node string // path of node; "" when Node.js or npm is missing
	err  error  // the install failed: npm cases fail rather than skip
	took time.Duration
}

// TestMain runs the official Go SDK server when the test binary is started
// as its helper process; otherwise it installs the npm servers once and runs
// the tests under goleak.
func TestMain(m *testing.M) {
	if os.Getenv(gosdkEnv) == "1" {
		os.Exit(runGoSDKServer())
	}
	if os.Getenv(gosdkChurnEnv) == "1" {
		os.Exit(runGoSDKChurnServer())
	}
	if os.Getenv(mcpgoEnv) == "1" {
		os.Exit(runMCPGoServer())
	}
	installNPM()
	goleak.VerifyTestMain(m)
}

// installNPM runs npm ci from the committed lockfile, unless node_modules
// already holds that lockfile's install (a stamp with its digest).
func installNPM() {
	node, errNode := exec.LookPath("node")
	npmBin, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		return
	}
	lock, err := os.ReadFile(filepath.Join(npmDir, "package-lock.json"))
	if err != nil {
		npm.err = err
		return
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(npmDir, "node_modules", ".mcpsync-lock-sha256")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		npm.node = node
		return
	}
	// The registry stalls now and then: an install that takes longer than
	// a healthy one by far is stopped and tried again, three times at most.
	start := time.Now()
	for attempt := 1; ; attempt++ {
		err := npmCI(npmBin)
		if err == nil {
			break
		}
		if attempt == npmAttempts {
			npm.err = err
			return
		}
		fmt.Fprintf(os.Stderr, "interop: npm ci, attempt %d of %d: %v\n", attempt, npmAttempts, err)
	}
	npm.took = time.Since(start)
	fmt.Fprintf(os.Stderr, "interop: npm ci installed the npm servers in %v\n", npm.took.Round(time.Millisecond))
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		npm.err = err
		return
	}
	npm.node = node
}

// npmAttempts is how many times installNPM runs npm ci, each for
// npmAttemptTimeout at most (a healthy install takes seconds).
const (
	npmAttempts       = 3
	npmAttemptTimeout = 3 * time.Minute
)

// npmCI runs npm ci once in npmDir.
func npmCI(npmBin string) error {
	ctx, cancel := context.WithTimeout(context.Background(), npmAttemptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npmBin, "ci", "--no-audit", "--no-fund", "--prefix", npmDir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("npm ci --prefix %s: %w\n%s", npmDir, err, out.String())
	}
	return nil
}

// needNode skips a test on a machine without Node.js and fails it when the
// install failed.
func needNode(tb testing.TB) string {
	tb.Helper()
	if npm.err != nil {
		tb.Fatalf("npm servers not installed: %v", npm.err)
	}
	if npm.node == "" {
		tb.Skip("Node.js/npm not found: npm interop cases skipped")
	}
	return npm.node
}
