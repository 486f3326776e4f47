//go:build race

package boltstore_test

// flipSample is how many bits the short form of TestEveryBitFlipped flips:
// fewer under the race detector, whose children open a store some eight
// times slower.
const flipSample = 150
