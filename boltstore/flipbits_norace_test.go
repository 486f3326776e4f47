//go:build !race

package boltstore_test

// flipSample: see flipbits_race_test.go.
const flipSample = 600
