//go:build race

package memstore

// raceEnabled: built with the race detector, which cannot see that
// goroutines pinned to one processor in turn never overlap (idSources):
// they take the source's lock instead.
const raceEnabled = true
