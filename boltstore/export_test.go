package boltstore

import "time"

// WithHostClock makes Open read the host clock, for its floor (floor.go),
// from now: a test can set it back, as the one condition under which a
// rolled-back store could issue a token again.
func WithHostClock(now func() time.Time) Option {
	return func(c *config) error {
		c.hostClock = now
		return nil
	}
}

// WithoutLogForBench makes Open's store write nothing to its log: each
// batch is made durable by committing the bbolt transaction (bbolt's own
// fsyncs), with the same commit loop and group commit. It exists to
// measure what the log gains (BenchmarkCompareBoltLog) and is no choice a
// user has.
func WithoutLogForBench() Option {
	return func(c *config) error {
		c.noLog = true
		return nil
	}
}

// Commits returns how many batches s has made durable since Open.
func Commits(s *Store) uint64 { return s.commits.Load() }

// Waiting returns how many AcquireWait calls wait in s's line for key: a
// test that must know a waiter has reached the line waits on it instead of
// sleeping.
func Waiting(s *Store, key string) int {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return len(s.queueOf(key))
}

// WithoutQuietGraceForTest makes Open ignore the mark of quiet renewals
// (quiet.go): the protection switched off, for the negative control of
// the tests that check it.
func WithoutQuietGraceForTest() Option {
	return func(c *config) error {
		c.noQuietGrace = true
		return nil
	}
}
