//go:build race

package memstore

// raceEnabled: the race detector makes sync.Pool drop a share of the items
// put back, on purpose, so the per-processor ID sources are made afresh now
// and then and allocation counts mean nothing.
const raceEnabled = true
