package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	mcpclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// Reads: the cost of the read path beside mcp-go alone. A fenced read
// through a Client (ticket, wire, digest, fence, receipt) is timed against
// mcp-go's own ReadResource of the same resource from the same server, in
// short alternating batches, so that both sides meet the same load on a
// shared machine. A read_ratio figure is the median, over the rounds, of the
// Client's time for its batch divided by mcp-go's time for its own; the side
// that goes first alternates from round to round.
//
// The stdio cases run two server processes (this program, serving the
// resource over stdio): one for mcp-go's stdio client, one for the Client's
// CommandDialer.

// readURI is the resource every read case reads, in readEra on both sides.
const (
	readURI = "file:///gate/read/doc.md"
	readEra = "2025-11-25"
)

// stdioServerEnv makes this program serve a resource of that many bytes over
// stdio instead of running the gate.
const stdioServerEnv = "MCPSYNC_GATE_STDIO_SERVER"

// serveStdio serves readURI, bytes long, over stdin and stdout.
func serveStdio(size string) int {
	n, err := strconv.Atoi(size)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcpsync-gate: stdio server:", err)
		return exitUsage
	}
	if err := server.ServeStdio(readServer(n).MCPServer()); err != nil {
		return exitFail
	}
	return exitPass
}

func readServer(size int) *mcpsynctest.Server {
	srv := mcpsynctest.NewServer(nil)
	srv.Set(readURI, "text/plain", strings.Repeat("x", size))
	return srv
}

// readCase is one read measured beside mcp-go.
type readCase struct {
	Name      string `json:"name"`
	Transport string `json:"transport"` // in-process or stdio
	Bytes     int    `json:"bytes"`
	Rounds    int    `json:"rounds"`
	Batch     int    `json:"batch"` // reads of each side per round
	// Medians over the rounds of one read's time.
	MCPSyncMicros float64 `json:"mcpsyncMicroseconds"`
	RawMicros     float64 `json:"mcpgoMicroseconds"`
	// Ratio is the median of the rounds' ratios; P25 and P75 bound the
	// middle half of them.
	Ratio float64 `json:"ratio"`
	P25   float64 `json:"ratioP25"`
	P75   float64 `json:"ratioP75"`
}

// readPlan is one case to measure: its size and how.
type readPlan struct {
	name          string
	stdio         bool
	size          int
	rounds, batch int
}

// readPlans are the cases the long gate measures: rounds of a few
// milliseconds a side, so that a burst of other work on the machine falls
// on both sides of a round or spoils that round alone.
var readPlans = []readPlan{
	{name: "read_ratio_1KiB", size: 1 << 10, rounds: 300, batch: 40},
	{name: "read_ratio_1MiB", size: 1 << 20, rounds: 40, batch: 1},
	{name: "read_ratio_stdio_1KiB", stdio: true, size: 1 << 10, rounds: 300, batch: 20},
}

func runReads(ctx context.Context, plans []readPlan) ([]readCase, error) {
	var out []readCase
	for _, p := range plans {
		rc, err := measureRead(ctx, p)
		if err != nil {
			return out, fmt.Errorf("%s: %w", p.name, err)
		}
		out = append(out, rc)
	}
	return out, nil
}

// readPair is a Client and a bare mcp-go client reading the same resource.
type readPair struct {
	c   *mcpsync.Client
	raw *mcpclient.Client
}

func (rp readPair) close() {
	if rp.c != nil {
		_ = rp.c.Close()
	}
	if rp.raw != nil {
		_ = rp.raw.Close()
	}
}

func openReadPair(ctx context.Context, p readPlan) (rp readPair, err error) {
	defer func() {
		if err != nil {
			rp.close()
		}
	}()
	var dial mcpsync.Dialer
	if p.stdio {
		self, err := os.Executable()
		if err != nil {
			return rp, err
		}
		env := append(os.Environ(), stdioServerEnv+"="+strconv.Itoa(p.size))
		tr := transport.NewStdio(self, env)
		if err := tr.Start(ctx); err != nil {
			return rp, err
		}
		rp.raw = mcpclient.NewClient(tr, mcpclient.WithProtocolVersion(readEra))
		dial = mcpsync.CommandDialer(mcpsync.Command{Name: self, Env: env})
	} else {
		srv := readServer(p.size)
		rp.raw = mcpclient.NewClient(srv.NewInProcessTransport(), mcpclient.WithProtocolVersion(readEra))
		if err := rp.raw.Start(ctx); err != nil {
			return rp, err
		}
		dial = func(context.Context) (transport.Interface, error) { return srv.NewInProcessTransport(), nil }
	}
	if _, err := rp.raw.Initialize(ctx, mcp.InitializeRequest{}); err != nil {
		return rp, err
	}
	rp.c, err = mcpsync.Connect(ctx, dial, &mcpsync.ClientOptions{Subject: gatePrincipal, ProtocolVersion: readEra})
	if err != nil {
		return rp, err
	}
	if _, err := rp.c.Subscribe(ctx, readURI); err != nil {
		return rp, err
	}
	return rp, nil
}

func measureRead(ctx context.Context, p readPlan) (readCase, error) {
	rc := readCase{Name: p.name, Transport: "in-process", Bytes: p.size, Rounds: p.rounds, Batch: p.batch}
	if p.stdio {
		rc.Transport = "stdio"
	}
	rp, err := openReadPair(ctx, p)
	if err != nil {
		return rc, err
	}
	defer rp.close()
	req := mcp.ReadResourceRequest{}
	req.Params.URI = readURI
	raw := func() error {
		for range p.batch {
			if _, err := rp.raw.ReadResource(ctx, req); err != nil {
				return err
			}
		}
		return nil
	}
	fenced := func() error {
		for range p.batch {
			out, err := rp.c.Read(ctx, readURI)
			if err != nil {
				return err
			}
			if !out.Accepted {
				return fmt.Errorf("read not accepted: %s", out.Stale.Reason)
			}
		}
		return nil
	}
	timed := func(f func() error) (time.Duration, error) {
		start := time.Now()
		err := f()
		return time.Since(start), err
	}
	// A warm-up round of each, unmeasured.
	if err := raw(); err != nil {
		return rc, err
	}
	if err := fenced(); err != nil {
		return rc, err
	}
	ratios := make([]float64, 0, p.rounds)
	var rawTimes, syncTimes []time.Duration
	for round := range p.rounds {
		var dr, ds time.Duration
		var err error
		if round%2 == 0 {
			if dr, err = timed(raw); err == nil {
				ds, err = timed(fenced)
			}
		} else {
			if ds, err = timed(fenced); err == nil {
				dr, err = timed(raw)
			}
		}
		if err != nil {
			return rc, err
		}
		rawTimes = append(rawTimes, dr/time.Duration(p.batch))
		syncTimes = append(syncTimes, ds/time.Duration(p.batch))
		ratios = append(ratios, float64(ds)/float64(dr))
	}
	slices.Sort(ratios)
	rc.Ratio = ratioQuantile(ratios, 0.5)
	rc.P25, rc.P75 = ratioQuantile(ratios, 0.25), ratioQuantile(ratios, 0.75)
	rc.RawMicros = float64(percentile(rawTimes, 0.5)) / 1e3
	rc.MCPSyncMicros = float64(percentile(syncTimes, 0.5)) / 1e3
	return rc, nil
}

// ratioQuantile returns the q-quantile of sorted xs, interpolating between ranks.
func ratioQuantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return nan()
	}
	pos := q * float64(len(xs)-1)
	i := int(pos)
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (pos-float64(i))*(xs[i+1]-xs[i])
}

func nan() float64 {
	zero := 0.0
	return zero / zero
}

func readFigures(cases []readCase) []figure {
	figs := make([]figure, 0, len(cases))
	for _, rc := range cases {
		detail := fmt.Sprintf("%s, %d bytes: Client.Read %.1f µs against mcp-go ReadResource %.1f µs (medians of %d rounds of %d reads each, interleaved); middle half of the rounds' ratios %.3f–%.3f",
			rc.Transport, rc.Bytes, rc.MCPSyncMicros, rc.RawMicros, rc.Rounds, rc.Batch, rc.P25, rc.P75)
		figs = append(figs, judge(rc.Name, rc.Ratio, bound{"<=", 1.15}, &bound{"<=", 1.05}, "x", false, detail))
	}
	return figs
}
