package mcpsync

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/mcpsync/mcpsync/ledger"
)

// meterName is the instrumentation scope of the library's instruments.
const meterName = "github.com/mcpsync/mcpsync"

// metrics are a Client's instruments on the caller's MeterProvider (the
// OpenTelemetry metric API; the caller brings the SDK):
//
//   - mcpsync.reads: reads by trigger and outcome (a decision, a refusal's
//     reason, or FAILED for a read that got no answer);
//   - mcpsync.reconnects: sessions opened after the first;
//   - mcpsync.validation.age: the oldest confirmation of a watched URI's
//     version, in seconds;
//   - mcpsync.outbox.depth: outbox entries not yet acknowledged by the
//     slowest consumer.
type metrics struct {
	reads      metric.Int64Counter
	reconnects metric.Int64Counter

	mu sync.Mutex // protects readOpts
	// readOpts are the attributes of each trigger and outcome counted so
	// far (a few dozen at most), built once: every read is counted.
	readOpts map[readKey][]metric.AddOption
}

type readKey struct {
	trigger ledger.Trigger
	outcome string
}

func newMetrics(c *Client, mp metric.MeterProvider) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter(meterName)
	reads, err := m.Int64Counter("mcpsync.reads", metric.WithUnit("{read}"),
		metric.WithDescription("Fenced reads, by trigger and outcome."))
	if err != nil {
		return nil, err
	}
	reconnects, err := m.Int64Counter("mcpsync.reconnects", metric.WithUnit("{session}"),
		metric.WithDescription("Sessions opened after the first."))
	if err != nil {
		return nil, err
	}
	if _, err := m.Float64ObservableGauge("mcpsync.validation.age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest confirmation of a watched resource's version."),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(c.validationAge().Seconds())
			return nil
		})); err != nil {
		return nil, err
	}
	if _, err := m.Int64ObservableGauge("mcpsync.outbox.depth", metric.WithUnit("{entry}"),
		metric.WithDescription("Outbox entries the slowest consumer has not acknowledged."),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			st, err := c.engine.OutboxState(ctx)
			if err != nil {
				return err
			}
			slowest := st.Last
			for _, pos := range st.Consumers {
				slowest = min(slowest, pos)
			}
			o.Observe(int64(st.Last - slowest))
			return nil
		})); err != nil {
		return nil, err
	}
	return &metrics{reads: reads, reconnects: reconnects, readOpts: make(map[readKey][]metric.AddOption)}, nil
}

// read counts one read of trigger with its outcome.
func (m *metrics) read(trigger ledger.Trigger, outcome string) {
	key := readKey{trigger, outcome}
	m.mu.Lock()
	opts := m.readOpts[key]
	if opts == nil {
		opts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(
			attribute.String("trigger", string(trigger)), attribute.String("outcome", outcome)))}
		m.readOpts[key] = opts
	}
	m.mu.Unlock()
	m.reads.Add(context.Background(), 1, opts...)
}

// outcomeOf names what the fence did with a read.
func outcomeOf(out Outcome) string {
	if out.Accepted {
		return string(out.Version.Decision)
	}
	return string(out.Stale.Reason)
}

// validationAge is how long ago the least recently confirmed watched
// version was confirmed (0 with nothing confirmed).
func (c *Client) validationAge() time.Duration {
	c.mu.Lock()
	keys := make([]string, 0, len(c.watches))
	for key := range c.watches {
		keys = append(keys, key)
	}
	c.mu.Unlock()
	var oldest time.Duration
	for _, key := range keys {
		if entry, err := c.engine.Lookup(c.opts.Subject, key); err == nil && !entry.ValidatedAt.IsZero() {
			oldest = max(oldest, time.Since(entry.ValidatedAt))
		}
	}
	return oldest
}
