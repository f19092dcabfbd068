package mcpsynctest

// Heal stops every fault of the Transport, as when a network recovers:
// request rules not yet taken are forgotten, every Hold is released (held
// requests and responses go on), held and reordered notifications of a
// live session are delivered, and the drop, duplicate, delay, reorder, URI
// rewrite, forged snapshot and cursor cycle faults are switched off.
// Notifications already delayed by a timer still arrive when it fires. A
// test calls it to mark the last fault of a schedule, after which only the
// client's own work remains. DropSession and EndListenStreams are not
// undone: a session that was dropped stays dropped.
func (t *Transport) Heal() {
	t.mu.Lock()
	holds := t.holds
	t.holds, t.rules = nil, nil
	t.dropRate, t.dupRate = 0, 0
	clear(t.dropNext)
	clear(t.dupNext)
	clear(t.reorders)
	clear(t.cycles)
	t.delays, t.mapURI, t.forge = nil, nil, ForgeNone
	held := append(t.held, t.reordered...)
	t.held, t.reordered = nil, nil
	t.logf("heal: %d holds released, %d notifications delivered", len(holds), len(held))
	if !t.closed && !t.dropped {
		t.enqueueLocked(held...)
	}
	t.mu.Unlock()
	for _, h := range holds {
		h.Release()
	}
}
