package mcpsync

import "github.com/mcpsync/mcpsync/ledger"

// The subscription state machine: the steps between the states of
// ledger.SubscriptionState (its doc draws them), which every write of a
// record takes through transitions.move.

// readable reports whether a read may be issued: the subscription is open,
// or its tombstone is pending or confirmed while the server still notifies
// it (a read that finds the resource brings it back).
func readable(s SubscriptionState) bool {
	return s.Open() || s == StateTombstonePending || s == StateTombstoned
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
var transitionTable = map[string]map[SubscriptionState]SubscriptionState{
	evSubscribe: {StateDiscovered: StateSubscribing},
	evActivate:  {StateSubscribing: StateActive},
	// A pulse while reads are in flight changes no state: the read queue
	// marks the URI dirty instead. A pulse or a read of a URI whose
	// tombstone is pending or confirmed returns it to the live path: the
	// server may have it again, and only a read can tell.
	evNotify: {
		StateActive: StateUpdateSeen, StateUpdateSeen: StateUpdateSeen,
		StateTombstonePending: StateUpdateSeen, StateTombstoned: StateUpdateSeen,
	},
	evIssueRead: {
		StateActive: StateReadPending, StateUpdateSeen: StateReadPending, StateReadPending: StateReadPending,
		StateTombstonePending: StateReadPending, StateTombstoned: StateReadPending,
	},
	evAccept: {StateReadPending: StateVersionAccepted},
	// VERSION_ACCEPTED is left in the same step: to ACTIVE when no read is
	// left in flight, back to READ_PENDING when another one is.
	evSettle:        {StateReadPending: StateActive, StateVersionAccepted: StateActive},
	evReadsInFlight: {StateVersionAccepted: StateReadPending, StateActive: StateReadPending},
	evNotFound: {
		StateReadPending: StateTombstonePending, StateVersionAccepted: StateTombstonePending,
	},
	evBeginClose: {
		StateSubscribing: StateUnsubscribing, StateActive: StateUnsubscribing,
		StateUpdateSeen: StateUnsubscribing, StateReadPending: StateUnsubscribing,
		StateVersionAccepted: StateUnsubscribing, StateTombstonePending: StateUnsubscribing,
		StateReconciliationRequired: StateUnsubscribing,
		// A confirmed tombstone is still subscribed on the server.
		StateTombstoned: StateUnsubscribing,
	},
	evCloseAcked:   {StateUnsubscribing: StateClosed},
	evCloseLost:    {StateUnsubscribing: StateUnsubscribeUnknown},
	evResolveClose: {StateUnsubscribeUnknown: StateClosed},
	evPresent:      {StateTombstonePending: StateActive, StateReconciliationRequired: StateActive},
	evAbsent:       {StateTombstonePending: StateTombstoned, StateReconciliationRequired: StateTombstoned},
	evStillAbsent:  {StateReadPending: StateTombstoned, StateVersionAccepted: StateTombstoned},
	// The second not-found of a corroboration (deletion.go) confirms the
	// tombstone in the step that accepts it.
	evCorroborated: {StateReadPending: StateTombstoned, StateVersionAccepted: StateTombstoned},
	// Missing from clean scans long enough (DeletionUnlisted), whatever
	// its reads answer.
	evUnlisted: {
		StateActive: StateTombstoned, StateUpdateSeen: StateTombstoned, StateReadPending: StateTombstoned,
		StateVersionAccepted: StateTombstoned, StateTombstonePending: StateTombstoned,
		StateReconciliationRequired: StateTombstoned,
	},
	evIdentityUnknown: {
		StateActive: StateReconciliationRequired, StateUpdateSeen: StateReconciliationRequired,
		StateReadPending: StateReconciliationRequired, StateVersionAccepted: StateReconciliationRequired,
		StateTombstonePending: StateReconciliationRequired,
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
	stateNames = [...]SubscriptionState{
		StateDiscovered, StateSubscribing, StateActive, StateUpdateSeen, StateReadPending,
		StateVersionAccepted, StateUnsubscribing, StateClosed, StateUnsubscribeUnknown,
		StateTombstonePending, StateTombstoned, StateReconciliationRequired,
	}
)

// nextState returns the state event leads to from from, as transitionTable
// says.
func nextState(event string, from SubscriptionState) (SubscriptionState, bool) {
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

func stateIndex(s SubscriptionState) int {
	switch s {
	case StateDiscovered:
		return 0
	case StateSubscribing:
		return 1
	case StateActive:
		return 2
	case StateUpdateSeen:
		return 3
	case StateReadPending:
		return 4
	case StateVersionAccepted:
		return 5
	case StateUnsubscribing:
		return 6
	case StateClosed:
		return 7
	case StateUnsubscribeUnknown:
		return 8
	case StateTombstonePending:
		return 9
	case StateTombstoned:
		return 10
	case StateReconciliationRequired:
		return 11
	}
	return -1
}
