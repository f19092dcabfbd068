package mcpsync

import "github.com/mcpsync/mcpsync/ledger"

// The subscription state machine: the steps between the states of
// ledger.SubscriptionState (its doc draws them), which every write of a
// record takes through transitions.move.

// readable reports whether a read may be issued: the subscription is open,
// or its tombstone is pending or confirmed while the server still notifies
// it (a read that finds the resource brings it back).
func readable(s ledger.SubscriptionState) bool {
	return s.Open() || s == ledger.StateTombstonePending || s == ledger.StateTombstoned
}

// Events of the state machine.
const (
	evSubscribe       = "subscribe"
	evActivate        = "activate"
	evNotify          = "notify"
	evIssueRead       = "issue read"
	evAccept          = "accept"
	evSettle          = "settle"
	evReadsInFlight   = "reads in flight"
	evNotFound        = "not found"
	evBeginClose      = "begin close"
	evCloseAcked      = "unsubscribe acked"
	evCloseLost       = "unsubscribe ack lost"
	evResolveClose    = "resolve unsubscribe"
	evPresent         = "reconcile present"
	evAbsent          = "reconcile absent"
	evIdentityUnknown = "identity unknown"
	evStillAbsent     = "still absent"
	evCorroborated    = "corroborated absent"
	evForget          = "forget"
	evUnlisted        = "unlisted"
)

// transitionTable lists every allowed state change: event -> from -> to.
// Anything not listed is a *TransitionError and leaves the state as it was.
var transitionTable = map[string]map[ledger.SubscriptionState]ledger.SubscriptionState{
	evSubscribe: {ledger.StateDiscovered: ledger.StateSubscribing},
	evActivate:  {ledger.StateSubscribing: ledger.StateActive},
	// A pulse while reads are in flight changes no state: the read queue
	// marks the URI dirty instead. A pulse or a read of a URI whose
	// tombstone is pending or confirmed returns it to the live path: the
	// server may have it again, and only a read can tell.
	evNotify: {
		ledger.StateActive: ledger.StateUpdateSeen, ledger.StateUpdateSeen: ledger.StateUpdateSeen,
		ledger.StateTombstonePending: ledger.StateUpdateSeen, ledger.StateTombstoned: ledger.StateUpdateSeen,
	},
	evIssueRead: {
		ledger.StateActive: ledger.StateReadPending, ledger.StateUpdateSeen: ledger.StateReadPending, ledger.StateReadPending: ledger.StateReadPending,
		ledger.StateTombstonePending: ledger.StateReadPending, ledger.StateTombstoned: ledger.StateReadPending,
	},
	evAccept: {ledger.StateReadPending: ledger.StateVersionAccepted},
	// VERSION_ACCEPTED is left in the same step: to ACTIVE when no read is
	// left in flight, back to READ_PENDING when another one is.
	evSettle:        {ledger.StateReadPending: ledger.StateActive, ledger.StateVersionAccepted: ledger.StateActive},
	evReadsInFlight: {ledger.StateVersionAccepted: ledger.StateReadPending, ledger.StateActive: ledger.StateReadPending},
	evNotFound: {
		ledger.StateReadPending: ledger.StateTombstonePending, ledger.StateVersionAccepted: ledger.StateTombstonePending,
	},
	evBeginClose: {
		ledger.StateSubscribing: ledger.StateUnsubscribing, ledger.StateActive: ledger.StateUnsubscribing,
		ledger.StateUpdateSeen: ledger.StateUnsubscribing, ledger.StateReadPending: ledger.StateUnsubscribing,
		ledger.StateVersionAccepted: ledger.StateUnsubscribing, ledger.StateTombstonePending: ledger.StateUnsubscribing,
		ledger.StateReconciliationRequired: ledger.StateUnsubscribing,
		// A confirmed tombstone is still subscribed on the server.
		ledger.StateTombstoned: ledger.StateUnsubscribing,
	},
	evCloseAcked:   {ledger.StateUnsubscribing: ledger.StateClosed},
	evCloseLost:    {ledger.StateUnsubscribing: ledger.StateUnsubscribeUnknown},
	evResolveClose: {ledger.StateUnsubscribeUnknown: ledger.StateClosed},
	evPresent:      {ledger.StateTombstonePending: ledger.StateActive, ledger.StateReconciliationRequired: ledger.StateActive},
	evAbsent:       {ledger.StateTombstonePending: ledger.StateTombstoned, ledger.StateReconciliationRequired: ledger.StateTombstoned},
	evStillAbsent:  {ledger.StateReadPending: ledger.StateTombstoned, ledger.StateVersionAccepted: ledger.StateTombstoned},
	// The second not-found of a corroboration (deletion.go) confirms the
	// tombstone in the step that accepts it.
	evCorroborated: {ledger.StateReadPending: ledger.StateTombstoned, ledger.StateVersionAccepted: ledger.StateTombstoned},
	// Missing from clean scans long enough (DeletionUnlisted), whatever
	// its reads answer.
	evUnlisted: {
		ledger.StateActive: ledger.StateTombstoned, ledger.StateUpdateSeen: ledger.StateTombstoned, ledger.StateReadPending: ledger.StateTombstoned,
		ledger.StateVersionAccepted: ledger.StateTombstoned, ledger.StateTombstonePending: ledger.StateTombstoned,
		ledger.StateReconciliationRequired: ledger.StateTombstoned,
	},
	evIdentityUnknown: {
		ledger.StateActive: ledger.StateReconciliationRequired, ledger.StateUpdateSeen: ledger.StateReconciliationRequired,
		ledger.StateReadPending: ledger.StateReconciliationRequired, ledger.StateVersionAccepted: ledger.StateReconciliationRequired,
		ledger.StateTombstonePending: ledger.StateReconciliationRequired,
	},
}

// transitions records the steps one ledger write takes, to tell the observer
// once the write is stored. It is reset at each compare-and-swap attempt.
type transitions struct {
	gen uint64
	// steps holds each step as the indices of its event (eventNames) and
	// states (stateNames).
	steps [4]struct{ event, from, to uint8 }
	n     int
}

func (p *transitions) reset(cur *ledger.Record) {
	p.n, p.gen = 0, 0
	if cur != nil && cur.Sub != nil {
		p.gen = cur.Sub.Generation
	}
}

// transitionIndex is transitionTable as an array, for the events and states
// eventIndex and stateIndex know (every one the table names): move looks a
// step up without hashing. It holds the index of the state a step leads to,
// plus one; 0 where there is no step.
var transitionIndex = func() (x [len(eventNames)][len(stateNames)]uint8) {
	for event, steps := range transitionTable {
		for from, to := range steps {
			i, j, k := eventIndex(event), stateIndex(from), stateIndex(to)
			if i < 0 || j < 0 || k < 0 {
				panic("mcpsync: transition table names an unindexed event or state")
			}
			x[i][j] = uint8(k + 1)
		}
	}
	return x
}()

// eventNames and stateNames list the events and states of transitionTable
// in the order of eventIndex and stateIndex.
var (
	eventNames = [...]string{
		evSubscribe, evActivate, evNotify, evIssueRead, evAccept, evSettle, evReadsInFlight,
		evNotFound, evBeginClose, evCloseAcked, evCloseLost, evResolveClose, evPresent,
		evAbsent, evIdentityUnknown, evStillAbsent, evCorroborated, evForget, evUnlisted,
	}
	stateNames = [...]ledger.SubscriptionState{
		ledger.StateDiscovered, ledger.StateSubscribing, ledger.StateActive, ledger.StateUpdateSeen, ledger.StateReadPending,
		ledger.StateVersionAccepted, ledger.StateUnsubscribing, ledger.StateClosed, ledger.StateUnsubscribeUnknown,
		ledger.StateTombstonePending, ledger.StateTombstoned, ledger.StateReconciliationRequired,
	}
)

// nextState returns the state event leads to from from, as transitionTable
// says.
func nextState(event string, from ledger.SubscriptionState) (ledger.SubscriptionState, bool) {
	i, j := eventIndex(event), stateIndex(from)
	if i < 0 || j < 0 {
		// Not in the table: it names only indexed events and states.
		to, ok := transitionTable[event][from]
		return to, ok
	}
	if k := transitionIndex[i][j]; k > 0 {
		return stateNames[k-1], true
	}
	return "", false
}

// move applies event to r's state, or returns a *TransitionError.
func (p *transitions) move(r *ledger.Record, event string) error {
	i, j := eventIndex(event), stateIndex(r.State)
	k := uint8(0)
	if i >= 0 && j >= 0 {
		k = transitionIndex[i][j]
	}
	if k == 0 {
		key := ""
		if r.Sub != nil {
			key = r.Sub.URI
		}
		return &TransitionError{URI: key, From: r.State, Event: event}
	}
	if p.n < len(p.steps) {
		p.steps[p.n].event, p.steps[p.n].from, p.steps[p.n].to = uint8(i), uint8(j), k-1
		p.n++
	}
	r.State = stateNames[k-1]
	return nil
}

func eventIndex(event string) int {
	switch event {
	case evSubscribe:
		return 0
	case evActivate:
		return 1
	case evNotify:
		return 2
	case evIssueRead:
		return 3
	case evAccept:
		return 4
	case evSettle:
		return 5
	case evReadsInFlight:
		return 6
	case evNotFound:
		return 7
	case evBeginClose:
		return 8
	case evCloseAcked:
		return 9
	case evCloseLost:
		return 10
	case evResolveClose:
		return 11
	case evPresent:
		return 12
	case evAbsent:
		return 13
	case evIdentityUnknown:
		return 14
	case evStillAbsent:
		return 15
	case evCorroborated:
		return 16
	case evForget:
		return 17
	case evUnlisted:
		return 18
	}
	return -1
}

func stateIndex(s ledger.SubscriptionState) int {
	switch s {
	case ledger.StateDiscovered:
		return 0
	case ledger.StateSubscribing:
		return 1
	case ledger.StateActive:
		return 2
	case ledger.StateUpdateSeen:
		return 3
	case ledger.StateReadPending:
		return 4
	case ledger.StateVersionAccepted:
		return 5
	case ledger.StateUnsubscribing:
		return 6
	case ledger.StateClosed:
		return 7
	case ledger.StateUnsubscribeUnknown:
		return 8
	case ledger.StateTombstonePending:
		return 9
	case ledger.StateTombstoned:
		return 10
	case ledger.StateReconciliationRequired:
		return 11
	}
	return -1
}
