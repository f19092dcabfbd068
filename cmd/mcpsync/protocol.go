package main

import (
	"context"
	"fmt"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

// protocolError is a session on another revision than the one --protocol
// pinned: the server did not accept the pinned revision and answered its
// own. A pin is a requirement, so the command stops rather than run in
// another era than asked.
type protocolError struct {
	pinned, negotiated string
}

func (e *protocolError) Error() string {
	return fmt.Sprintf("--protocol %s: the server did not accept it and answered %s (--protocol auto accepts what the server offers)",
		e.pinned, e.negotiated)
}

// checkProtocol refuses a session whose revision is not the pinned one;
// with --protocol auto every revision passes.
func (c *common) checkProtocol(caps ledger.CapabilityReceipt) error {
	if pin := c.versionPin(); pin != "" && caps.ProtocolVersion != pin {
		return &protocolError{pinned: pin, negotiated: caps.ProtocolVersion}
	}
	return nil
}

// open connects as connect does and refuses a session on a revision
// --protocol did not pin.
func (c *common) open(ctx context.Context, opts mcpsync.ClientOptions, listen *bool) (*connection, error) {
	conn, err := c.connect(ctx, opts, listen)
	if err != nil {
		return nil, err
	}
	if err := c.checkProtocol(conn.client.Capabilities()); err != nil {
		_ = conn.close()
		return nil, err
	}
	return conn, nil
}
