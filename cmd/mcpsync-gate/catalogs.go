package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
	"github.com/mcpsync/mcpsync/mcpsynctest"
)

// catalogStats are the counts of the catalog scenario.
type catalogStats struct {
	Scans    int                           `json:"scans"`
	ByStatus map[mcpsync.CatalogStatus]int `json:"byStatus"`
	// AcceptedWithoutReconciliation: catalogs the library let be used
	// (status PROVEN or UNPROVEN) whose receipts do not show the
	// reconciliation their status claims, plus UNRECONCILED catalogs that
	// Reconcile accepted.
	AcceptedWithoutReconciliation int `json:"acceptedWithoutReconciliation"`
	// UnprovenConsumed: successful Catalog.Proven calls on catalogs that
	// are not SNAPSHOT_PROVEN, plus tombstones that Reconcile confirmed
	// from such a catalog (a completeness claim).
	UnprovenConsumed int `json:"unprovenConsumed"`
	// ProvenConsumed: Complete calls that succeeded on honestly proven
	// catalogs; the positive control (allowed).
	ProvenConsumed int `json:"provenConsumed"`
	// Deferred: absent URIs that Reconcile left for a proven catalog.
	Deferred int `json:"deferred"`
	// Torn: usable catalogs whose set was never the server's set at any
	// moment of the scan. Information only: two identical passes cannot
	// rule this out, which is why such a catalog stays UNPROVEN.
	Torn      int `json:"torn"`
	Mutations int `json:"mutations"`
}

// catalogRig is a server whose listing churns between pages, with the
// harness's own record of every set it held.
type catalogRig struct {
	name   string
	rig    *rig
	honest bool // declares the snapshot extension and is not forged

	mu      sync.Mutex // protects the fields below; OnPage runs on request goroutines
	rng     *rand.Rand
	rate    float64           // chance of a change after each page
	set     map[string]string // uri -> MIME type, as the server has it
	log     []string          // canonical form of every set the server held
	next    int               // name of the next new resource
	changes int
}

func canonicalSet(set map[string]string) string {
	keys := make([]string, 0, len(set))
	for u, mime := range set {
		keys = append(keys, u+"|"+mime)
	}
	slices.Sort(keys)
	return strings.Join(keys, "\n")
}

// churn changes the listing at random: a new resource, a deletion, a
// recreation (which moves the resource to the end of the listing), a new
// MIME type (a changed descriptor) or only new text (no change to the set).
func (cr *catalogRig) churn(kind string, _ int) {
	if kind != mcpsynctest.KindResources {
		return
	}
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if cr.rng.Float64() >= cr.rate {
		return
	}
	srv := cr.rig.srv
	keys := make([]string, 0, len(cr.set))
	for u := range cr.set {
		keys = append(keys, u)
	}
	slices.Sort(keys)
	u := keys[cr.rng.IntN(len(keys))]
	switch op := cr.rng.IntN(5); {
	case op == 0 || len(keys) < 4:
		u = fmt.Sprintf("file:///gate/catalog/n%04d.md", cr.next)
		cr.next++
		cr.set[u] = "text/plain"
		srv.Set(u, "text/plain", "new")
	case op == 1:
		delete(cr.set, u)
		srv.Delete(u)
	case op == 2:
		srv.Recreate(u, "again") // the descriptor stays: Recreate keeps it
	case op == 3:
		mime := "text/markdown"
		if cr.set[u] == mime {
			mime = "text/plain"
		}
		cr.set[u] = mime
		text, _ := srv.Text(u)
		srv.Set(u, mime, text)
	default:
		text, _ := srv.Text(u)
		srv.Set(u, cr.set[u], text+"!")
	}
	cr.changes++
	cr.log = append(cr.log, canonicalSet(cr.set))
}

// runCatalogs runs k scans, spread over four servers: a plain one, a plain
// one whose transport forges snapshot ids, an honest snapshot server, and a
// snapshot server whose transport gives every page a different id. All of
// them declare no list_changed; each scan draws how often the listing
// changes between pages (never, 5%, 15% or 40% of pages). Before the scans
// each server deletes two subscribed resources, which leaves them
// TOMBSTONE_PENDING: every catalog is then offered to Client.Reconcile,
// where only a proven catalog may confirm those tombstones.
func runCatalogs(ctx context.Context, p pace, seed uint64, k int) (catalogStats, error) {
	st := catalogStats{ByStatus: map[mcpsync.CatalogStatus]int{}}
	variants := []struct {
		name     string
		snapshot bool
		forge    mcpsynctest.ForgeMode
	}{
		{"plain", false, mcpsynctest.ForgeNone},
		{"forged-missing", false, mcpsynctest.ForgeMissing},
		{"snapshot", true, mcpsynctest.ForgeNone},
		{"snapshot-forged-vary", true, mcpsynctest.ForgeVary},
	}
	var rigs []*catalogRig
	defer func() {
		for _, cr := range rigs {
			cr.rig.c.Close()
		}
	}()
	for i, v := range variants {
		srv := mcpsynctest.NewServer(&mcpsynctest.ServerOptions{PageSize: 3, NoListChanged: true, Snapshot: v.snapshot})
		cr := &catalogRig{name: v.name, honest: v.snapshot && v.forge == mcpsynctest.ForgeNone,
			rng: rand.New(rand.NewPCG(seed, 0xca7+uint64(i))), set: map[string]string{}}
		for j := range 12 {
			u := fmt.Sprintf("file:///gate/catalog/r%02d.md", j)
			cr.set[u] = "text/plain"
			srv.Set(u, "text/plain", "v0")
		}
		doomed := []string{"file:///gate/catalog/doomed-a.md", "file:///gate/catalog/doomed-b.md"}
		for _, u := range doomed {
			srv.Set(u, "text/plain", "v0")
		}
		r, err := newRig(ctx, srv, seed, mcpsync.ClientOptions{
			RevalidateEvery: p.d(time.Hour),
			Scanner: &mcpsync.ScannerOptions{
				Rand: rand.NewPCG(seed, 0x5ca+uint64(i)), MaxAttempts: 5,
				BackoffBase: p.d(50 * time.Millisecond), BackoffMax: p.d(400 * time.Millisecond),
			},
		})
		if err != nil {
			return st, err
		}
		cr.rig = r
		rigs = append(rigs, cr)
		r.faults().ForgeSnapshotIDs(v.forge)
		for _, u := range doomed {
			if _, err := r.c.Subscribe(ctx, u); err != nil {
				return st, err
			}
		}
		if err := p.settle(func() bool { return r.completed() == len(doomed) }); err != nil {
			return st, fmt.Errorf("%s: initial reads: %w", v.name, err)
		}
		for _, u := range doomed {
			srv.Delete(u)
		}
		if err := p.settle(func() bool {
			for _, u := range doomed {
				if sub, err := r.c.Engine().Subscription(u); err != nil || sub.State != ledger.StateTombstonePending {
					return false
				}
			}
			return true
		}); err != nil {
			return st, fmt.Errorf("%s: tombstones pending: %w", v.name, err)
		}
		cr.log = []string{canonicalSet(cr.set)}
		srv.OnPage(cr.churn)
	}
	rates := []float64{0, 0.05, 0.15, 0.4}
	pick := rand.New(rand.NewPCG(seed, 0x7a7e))
	for i := range k {
		cr := rigs[i%len(rigs)]
		cr.mu.Lock()
		cr.rate = rates[pick.IntN(len(rates))]
		start := len(cr.log) - 1
		cr.mu.Unlock()
		cat, _ := cr.rig.c.Scan(ctx, mcpsync.KindResources)
		cr.mu.Lock()
		cr.rate = 0
		seen := slices.Clone(cr.log[start:])
		cr.mu.Unlock()
		st.Scans++
		st.ByStatus[cat.Status]++
		st.judge(cr, cat, seen)
	}
	for _, cr := range rigs {
		st.Mutations += cr.changes
	}
	return st, nil
}

// judge applies both catalog checks to one catalog, and offers it to the
// tasks that need a complete enumeration. Only a catalog whose proof holds
// up (honestly SNAPSHOT_PROVEN) may serve them; one that claims the proof
// without it counts as unproven.
func (st *catalogStats) judge(cr *catalogRig, cat mcpsync.Catalog, seen []string) {
	c := cr.rig.c
	earned := false
	if cat.Status != mcpsync.CatalogUnreconciled {
		earned = reconciled(cat, cr.honest && c.Capabilities().SnapshotList)
		if !earned {
			st.AcceptedWithoutReconciliation++
		}
		set := map[string]string{}
		for _, d := range cat.Descriptors {
			set[d.URI] = d.MIMEType
		}
		if !slices.Contains(seen, canonicalSet(set)) {
			st.Torn++
		}
	}
	proven := earned && cat.Status == mcpsync.CatalogSnapshotProven
	_, err := cat.Proven(time.Now(), c.Engine().SessionGeneration())
	switch {
	case err == nil && proven:
		st.ProvenConsumed++
	case err == nil:
		st.UnprovenConsumed++
	}
	rec, err := c.Reconcile(cat)
	if cat.Status == mcpsync.CatalogUnreconciled && err == nil {
		st.AcceptedWithoutReconciliation++
	}
	if !proven {
		st.UnprovenConsumed += len(rec.Tombstoned)
	}
	st.Deferred += len(rec.Deferred)
}

// reconciled checks, from the catalog's own receipts, that its status is
// earned: SNAPSHOT_PROVEN needs the extension negotiated (mayProve) and a
// clean last pass whose pages all carry the catalog's snapshot id;
// SNAPSHOT_UNPROVEN needs its last two receipts to be passes A and B of one
// attempt, both clean, without list_changed, with equal set digests that
// match the catalog's items.
// onlyListingFacts reports whether faults are only repeats or aliases: facts
// about the server's listing that withhold proof but leave a pass clean.
func onlyListingFacts(faults []mcpsync.ScanFault) bool {
	for _, f := range faults {
		if f.Fault != mcpsync.FaultRepeatedItem && f.Fault != mcpsync.FaultAliasedItem {
			return false
		}
	}
	return true
}

func reconciled(cat mcpsync.Catalog, mayProve bool) bool {
	n := len(cat.Scans)
	if n == 0 || setDigest(cat) != cat.SetDigest {
		return false
	}
	switch cat.Status {
	case mcpsync.CatalogSnapshotProven:
		last := cat.Scans[n-1]
		if !mayProve || last.Outcome != mcpsync.PassClean || last.SnapshotID == "" || last.SnapshotID != cat.SnapshotID ||
			len(last.SnapshotFaults) > 0 || last.SetDigest != cat.SetDigest {
			return false
		}
		for _, pg := range last.Pages {
			if pg.SnapshotID != cat.SnapshotID {
				return false
			}
		}
		return true
	case mcpsync.CatalogSnapshotUnproven:
		if n < 2 {
			return false
		}
		a, b := cat.Scans[n-2], cat.Scans[n-1]
		return a.Attempt == b.Attempt && a.Pass == "A" && b.Pass == "B" &&
			a.Outcome == mcpsync.PassClean && b.Outcome == mcpsync.PassClean &&
			a.ListChangedSeen == 0 && b.ListChangedSeen == 0 && onlyListingFacts(a.Faults) && onlyListingFacts(b.Faults) &&
			a.SetDigest == b.SetDigest && b.SetDigest == cat.SetDigest
	}
	return false
}

// setDigest recomputes a catalog's set digest from its items, in the
// canonical form documented on mcpsync.Catalog.SetDigest.
func setDigest(cat mcpsync.Catalog) string {
	type keyed struct {
		key string
		d   mcpsync.Descriptor
	}
	set := make([]keyed, 0, len(cat.Descriptors))
	for _, d := range cat.Descriptors {
		set = append(set, keyed{d.Key(), d})
	}
	slices.SortFunc(set, func(a, b keyed) int {
		return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.d.URI, b.d.URI), cmp.Compare(a.d.URITemplate, b.d.URITemplate),
			cmp.Compare(a.d.Name, b.d.Name), cmp.Compare(a.d.MIMEType, b.d.MIMEType))
	})
	set = slices.Compact(set)
	h := sha256.New()
	str := func(s string) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
		h.Write([]byte(s))
	}
	h.Write([]byte("mcpsync.descriptors.v1\x00"))
	str(string(cat.Kind))
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(set))))
	for _, k := range set {
		str(k.key)
		str(k.d.URI)
		str(k.d.URITemplate)
		str(k.d.Name)
		str(k.d.MIMEType)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func catalogFigures(s catalogStats) []figure {
	zero := bound{"==", 0}
	detail := fmt.Sprintf("%d scans under %d listing changes: %d SNAPSHOT_PROVEN, %d SNAPSHOT_UNPROVEN, %d UNRECONCILED; "+
		"%d proven catalogs consumed (allowed), %d absent URIs deferred, %d usable catalogs torn (UNPROVEN cannot exclude it)",
		s.Scans, s.Mutations, s.ByStatus[mcpsync.CatalogSnapshotProven], s.ByStatus[mcpsync.CatalogSnapshotUnproven],
		s.ByStatus[mcpsync.CatalogUnreconciled], s.ProvenConsumed, s.Deferred, s.Torn)
	return []figure{
		judge("catalogs_accepted_without_reconciliation", float64(s.AcceptedWithoutReconciliation), zero, nil, "count", true, detail),
		judge("unproven_catalogs_consumed_by_completeness", float64(s.UnprovenConsumed), zero, nil, "count", true, detail),
	}
}
