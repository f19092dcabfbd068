package boltledger

// Commits returns how many transactions l's committer committed.
func Commits(l *Ledger) uint64 { return l.commits.count.Load() }
