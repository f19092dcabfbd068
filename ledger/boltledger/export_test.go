package boltledger

// Commits returns how many transactions l's committer committed.
func Commits(l *Ledger) uint64 { return l.commits.count.Load() }

// DecodeStored reads a stored record and EntryStored a stored outbox
// entry, of either form; EncodeStored and StoreEntry write them.
var (
	DecodeStored = decodeRecord
	EntryStored  = decodeEntry
	EncodeStored = encodeRecord
	StoreEntry   = encodeEntry
)
