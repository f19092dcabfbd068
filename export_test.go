package mcpsync

import "github.com/mcpsync/mcpsync/ledger"

// Names the tests of package mcpsync_test reach discovery, deletion and
// rollout through: no program outside the package calls these, so the
// package exports them to its tests alone.

type (
	Scanner     = scanner
	Page        = listPage
	PageFunc    = pageFunc
	AbsenceScan = ledger.UnlistedScan
)

var CursorDigest = cursorDigest

// NewScanner is newScanner with the default page cap.
func NewScanner(opts *ScannerOptions) (*scanner, error) { return newScanner(opts, 0) }

// WithMaxPages sets the page cap of s (Limits.MaxScanPages) and returns s.
func (s *scanner) WithMaxPages(n int) *scanner {
	s.maxPages = n
	return s
}

// Corroborate is corroborate: Catalog.Reconcile's step for one
// TOMBSTONE_PENDING URI an unproven catalog does not list.
func (e *Engine) Corroborate(rawURI string, scan AbsenceScan) (ledger.Ticket, bool, error) {
	return e.corroborate(rawURI, scan)
}

// RefreshPosition is the position of uri's subscription against the refresh
// fraction (SetRefreshFraction).
func RefreshPosition(uri string) (float64, error) {
	key, err := normalizeKey(uri)
	if err != nil {
		return 0, err
	}
	return position(key), nil
}

// Reopen is reopen: the Client's replacement of a URI's generation, closed
// and the next opened in one write.
func (e *Engine) Reopen(rawURI, subject string) (Subscription, error) {
	return e.reopen(rawURI, subject)
}
