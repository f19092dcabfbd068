package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/ledger/boltledger"
	"github.com/mcpsync/mcpsync/ledger/pgledger"
)

// nonEmpty is a flag value that must not be empty: a ledger's path, a
// consumer's name. Absent, it is "".
type nonEmpty string

func (s *nonEmpty) String() string { return string(*s) }

func (s *nonEmpty) Set(v string) error {
	if v == "" {
		return errors.New("must not be empty")
	}
	*s = nonEmpty(v)
	return nil
}

// ledgerUse says what a command does with a ledger that is not there yet.
type ledgerUse int

const (
	// createLedger: a command that syncs starts a new ledger.
	createLedger ledgerUse = iota
	// existingLedger: a command that inspects one has nothing to inspect,
	// and creating an empty file would only hide a mistyped path.
	existingLedger
)

// ledgerLockWait bounds the wait for a ledger file another process holds.
// Its holder is another mcpsync, and a watch holds it for as long as it
// runs: waiting longer would only delay the answer.
const ledgerLockWait = time.Second

// openLedger opens the ledger spec names and returns it with the function
// that closes it. A spec is the path of a bolt ledger file; stores of other
// kinds are told apart here, by the scheme of their URL, one case each.
func openLedger(ctx context.Context, spec string, use ledgerUse) (ledger.Ledger, func() error, error) {
	switch {
	case strings.HasPrefix(spec, "postgres://"), strings.HasPrefix(spec, "postgresql://"):
		l, err := openSharedLedger(ctx, spec, use)
		if err != nil {
			return nil, nil, err
		}
		return l, l.Close, nil
	default:
		return openBoltLedger(spec, use)
	}
}

// openSharedLedger opens the PostgreSQL ledger at url, fenced by leases:
// many workers share it, and each writes only the URIs whose leases it
// holds.
func openSharedLedger(ctx context.Context, url string, use ledgerUse) (*pgledger.Ledger, error) {
	opts := &pgledger.Options{Leases: &pgledger.LeaseOptions{}}
	// ?schema=NAME picks the PostgreSQL schema of the ledger (default
	// "mcpsync"); it is the command's, not the server's, parameter.
	if u, err := neturl.Parse(url); err == nil && u.Query().Has("schema") {
		q := u.Query()
		opts.Schema = q.Get("schema")
		if opts.Schema == "" {
			// An unset variable, most likely: the default schema is shared
			// by every deployment that names none.
			return nil, usagef("?schema= names no schema")
		}
		q.Del("schema")
		u.RawQuery = q.Encode()
		url = u.String()
	}
	if use == existingLedger {
		if err := ledgerSchemaExists(ctx, url, opts.Schema); err != nil {
			return nil, err
		}
	}
	l, err := pgledger.Open(ctx, url, opts)
	if err != nil {
		return nil, wrapf(err, "ledger %s", redact(url))
	}
	return l, nil
}

// ledgerSchemaExists refuses a schema with no ledger: a command that inspects a
// ledger creates none (a mistyped name would show an empty outbox).
func ledgerSchemaExists(ctx context.Context, url, schema string) error {
	if schema == "" {
		schema = pgledger.DefaultSchema
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return wrapf(err, "ledger %s", redact(url))
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM information_schema.schemata WHERE schema_name = $1)", schema).Scan(&exists); err != nil {
		return wrapf(err, "ledger %s", redact(url))
	}
	if !exists {
		return fmt.Errorf("no ledger at %s (schema %s)", redact(url), schema)
	}
	return nil
}

// redact drops the password of a connection URL, for messages.
func redact(url string) string {
	if u, err := neturl.Parse(url); err == nil {
		return u.Redacted()
	}
	return "postgres://…"
}

// openBoltLedger opens the bolt ledger file at path, creating it if missing
// unless use says it must exist.
func openBoltLedger(path string, use ledgerUse) (ledger.Ledger, func() error, error) {
	if use == existingLedger {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("no ledger at %s", path)
		}
	}
	l, err := boltledger.Open(path, &boltledger.Options{Timeout: ledgerLockWait})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		// bbolt locks the file for one process at a time, readers too.
		return nil, nil, fmt.Errorf("ledger %s is in use by another process (one process opens a ledger at a time)", path)
	case err != nil:
		return nil, nil, err
	}
	return l, l.Close, nil
}

// newEngine builds the engine a command syncs with: on the --ledger store
// when one is given, so the fence, the versions, the revocations and the
// outbox carry over to the next run; in memory otherwise. Call done once the
// client is closed.
func (c *common) newEngine(ctx context.Context, opts mcpsync.EngineOptions) (e *mcpsync.Engine, done func() error, err error) {
	done = func() error { return nil }
	if c.ledger != "" {
		if opts.Ledger, done, err = openLedger(ctx, string(c.ledger), createLedger); err != nil {
			return nil, nil, err
		}
		c.shared, _ = opts.Ledger.(*pgledger.Ledger)
	}
	if e, err = mcpsync.NewEngine(&opts); err != nil {
		_ = done()
		if c.ledger != "" {
			err = wrapf(err, "ledger %s", c.ledger)
		}
		return nil, nil, err
	}
	return e, done, nil
}
