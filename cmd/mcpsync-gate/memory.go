package main

import (
	"fmt"
	"runtime"

	"github.com/mcpsync/mcpsync"
	"github.com/mcpsync/mcpsync/ledger"
)

type memoryStats struct {
	Subscriptions int     `json:"subscriptions"`
	HeapBytes     int64   `json:"heapBytes"`
	PerSub        float64 `json:"bytesPerSubscription"`
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// measureMemory opens n active subscriptions (Subscribe + Activate, no read:
// no content by construction) in one Engine and divides the live heap they
// added, after a full collection, by n. The URIs are part of the engine's
// state and are counted; the engine itself is created before the first
// measurement.
func measureMemory(n int) (memoryStats, error) {
	st := memoryStats{Subscriptions: n}
	e, err := mcpsync.NewEngine(nil)
	if err != nil {
		return st, err
	}
	if _, err := e.BeginSession(mcpsync.SessionInfo{}); err != nil {
		return st, err
	}
	before := heapAlloc()
	for i := range n {
		key := fmt.Sprintf("file:///gate/memory/%07d.md", i)
		if _, err := e.Subscribe(key, gatePrincipal); err != nil {
			return st, err
		}
		if _, err := e.Activate(key, ledger.ModePush); err != nil {
			return st, err
		}
	}
	after := heapAlloc()
	runtime.KeepAlive(e)
	st.HeapBytes = int64(after) - int64(before)
	st.PerSub = float64(st.HeapBytes) / float64(n)
	return st, nil
}

func memoryFigure(s memoryStats) figure {
	return judge("memory_bytes_per_subscription", s.PerSub, bound{"<=", 1024}, nil, "bytes", false,
		fmt.Sprintf("%d active subscriptions in one Engine, no content: %d bytes of live heap", s.Subscriptions, s.HeapBytes))
}
