package mcpsync_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/mcpsync/mcpsync"
)

// countingProvider is a MeterProvider whose Int64Counters count what is
// added, by instrument and the trigger and outcome attributes.
type countingProvider struct {
	noop.MeterProvider
	mu     sync.Mutex
	counts map[[3]string]int64
}

func (p *countingProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return countingMeter{p: p}
}

func (p *countingProvider) count(name, trigger, outcome string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[[3]string{name, trigger, outcome}]
}

type countingMeter struct {
	noop.Meter
	p *countingProvider
}

func (m countingMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return countingCounter{p: m.p, name: name}, nil
}

type countingCounter struct {
	noop.Int64Counter
	p    *countingProvider
	name string
}

func (c countingCounter) Add(_ context.Context, n int64, opts ...metric.AddOption) {
	attrs := metric.NewAddConfig(opts).Attributes()
	trigger, _ := attrs.Value("trigger")
	outcome, _ := attrs.Value("outcome")
	c.p.mu.Lock()
	c.p.counts[[3]string{c.name, trigger.AsString(), outcome.AsString()}] += n
	c.p.mu.Unlock()
}

// Reads by trigger and outcome, and reconnects, reach the caller's
// MeterProvider.
func TestMetricsReachTheMeterProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mp := &countingProvider{counts: make(map[[3]string]int64)}
		r := newRig(t, eras[0], &mcpsync.ClientOptions{MeterProvider: mp})
		r.subscribeSettled(faultURI)
		assert.EqualValues(t, 1, mp.count("mcpsync.reads", "initial", "ACCEPTED"))
		require.NoError(t, r.c.Reconnect(t.Context()))
		quiesce()
		assert.EqualValues(t, 1, mp.count("mcpsync.reconnects", "", ""))
		assert.EqualValues(t, 1, mp.count("mcpsync.reads", "reconnect", "UNCHANGED"))
	})
}
