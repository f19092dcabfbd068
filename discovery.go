package mcpsync

// The snapshot extension of resources/list, opt-in for servers that can bind
// every page of a scan to one snapshot. A server declares it under
// capabilities.experimental (or extensions) with this key, and carries the
// snapshot id in the _meta of each list result.
const (
	SnapshotCapability = "io.github.mcpsync/listSnapshot"
	SnapshotIDMetaKey  = "io.github.mcpsync/snapshotId"
)
