package mcpsync_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/stretchr/testify/require"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// An engine is driven by one Client at a time: a second Connect on it is
// refused with ErrEngineInUse until the first is closed, and a Connect
// that failed leaves it free.
func TestConnectRefusesAnEngineAnotherClientDrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := mcpsynctest.NewServer(nil)
		srv.Set(docURI, "text/plain", "v1")
		e := newEngine(t, nil)
		connect := func(dial mcpsync.Dialer) (*mcpsync.Client, error) {
			return mcpsync.Connect(t.Context(), dial, &mcpsync.ClientOptions{Engine: e, Subject: alice})
		}
		inProcess := srv.Dialer()

		_, err := connect(func(context.Context) (transport.Interface, error) { return nil, errors.New("refused") })
		require.Error(t, err)
		first, err := connect(inProcess)
		require.NoError(t, err, "a failed Connect left the engine free")
		_, err = connect(inProcess)
		require.ErrorIs(t, err, mcpsync.ErrEngineInUse)

		require.NoError(t, first.Close())
		second, err := connect(inProcess)
		require.NoError(t, err, "a closed client leaves the engine free")
		require.NoError(t, second.Close())
	})
}
