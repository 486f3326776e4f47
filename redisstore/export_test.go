package redisstore

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting reports whether a WaitChange on key is registered with the
// subscription and key's lease carries the waiter's mark (want.lua), so that
// a release from now on must wake it. Tests wait for it instead of sleeping.
func (s *Store) Waiting(ctx context.Context, key string) (bool, error) {
	s.notify.mu.Lock()
	registered := len(s.notify.waiters[key]) > 0
	s.notify.mu.Unlock()
	if !registered {
		return false, nil
	}
	v, err := s.rdb.Get(ctx, s.leaseKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil && len(v) > 0 && v[0] == wanted, err
}

// SubscriptionDrops returns how many times s's subscription has dropped
// (and its waiters were told so): a test that cuts the subscription waits
// for the count to rise instead of sleeping.
func (s *Store) SubscriptionDrops() int {
	s.notify.mu.Lock()
	defer s.notify.mu.Unlock()
	return s.notify.drops
}

// RecheckEvery sets how often the Store re-reads the persistence settings
// (recheck.go; recheckEvery by default), so that tests of a setting changed
// at runtime wait for a check of milliseconds, not of a second.
func RecheckEvery(d time.Duration) Option {
	return func(c *config) error { c.recheckEvery = d; return nil }
}
