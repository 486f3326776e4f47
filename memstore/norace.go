//go:build !race

package memstore

// raceEnabled: see race.go.
const raceEnabled = false
