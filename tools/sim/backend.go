package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leasehq/lease"
)

// simBackend is one of client i's views of the backend: every call is a
// message on the simulated network, applied to the one memstore on
// delivery. It offers only lease.Backend, so the Client polls; watchBackend
// adds lease.Watcher.
type simBackend struct {
	s    *Sim
	c    *simClient
	lane lane
}

func (b *simBackend) name() string { return fmt.Sprintf("c%d.%d", b.c.idx, b.c.gen) }

func (b *simBackend) send(ctx context.Context, desc string, apply func() (any, error)) (any, error) {
	return b.s.send(ctx, b.c, b.lane, toBackend, b.name()+" "+desc, apply)
}

func (b *simBackend) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	desc := "acquire"
	if key != lockKey {
		desc += " " + key
	}
	v, err := b.send(ctx, desc, func() (any, error) {
		l, err := b.s.store.Acquire(context.Background(), key, owner, ttl)
		if err == nil {
			b.s.grant(l)
		}
		return l, err
	})
	if err != nil {
		return lease.Lease{}, err
	}
	return v.(lease.Lease), nil
}

func (b *simBackend) Renew(ctx context.Context, l lease.Lease, ttl time.Duration) (lease.Lease, error) {
	v, err := b.send(ctx, fmt.Sprintf("renew %stoken %d", keyDesc(l.Key), l.Token), func() (any, error) {
		r, err := b.s.store.Renew(context.Background(), l, ttl)
		if err == nil {
			b.s.renewed(r)
		}
		return r, err
	})
	if err != nil {
		return lease.Lease{}, err
	}
	return v.(lease.Lease), nil
}

func (b *simBackend) Release(ctx context.Context, l lease.Lease) error {
	_, err := b.send(ctx, fmt.Sprintf("release %stoken %d", keyDesc(l.Key), l.Token), func() (any, error) {
		err := b.s.store.Release(context.Background(), l)
		if err == nil {
			b.s.released(l)
		}
		return nil, err
	})
	return err
}

func (b *simBackend) Get(ctx context.Context, key string) (lease.Lease, error) {
	v, err := b.send(ctx, "get "+key, func() (any, error) { return b.s.store.Get(context.Background(), key) })
	if err != nil {
		return lease.Lease{}, err
	}
	return v.(lease.Lease), nil
}

func (b *simBackend) List(ctx context.Context, prefix string, page lease.Page) (lease.ListPage, error) {
	v, err := b.send(ctx, "list "+prefix, func() (any, error) { return b.s.store.List(context.Background(), prefix, page) })
	if err != nil {
		return lease.ListPage{}, err
	}
	return v.(lease.ListPage), nil
}

// keyDesc names a key in the trace, except the lock workload's one key.
func keyDesc(key string) string {
	if key == lockKey {
		return ""
	}
	return key + " "
}

// generation is one grant the backend made: a key and its token.
type generation struct {
	key   string
	token lease.Token
}

// granted is the oracle's record of one generation, kept from the
// backend's own answers: its owner, its expiry on the backend's clock (as
// granted or last renewed), and whether its holder released it.
type granted struct {
	owner    string
	expires  time.Time
	released bool
}

// grant records a grant at the backend: tokens must rise strictly per key
// (I1), and under the semaphore's slots no more than N generations may be
// unexpired and unreleased at once.
func (s *Sim) grant(l lease.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last := s.highestGrant[l.Key]; l.Token <= last {
		s.violateLocked(TokenOrder, "the backend granted %stoken %d after token %d", keyDesc(l.Key), l.Token, last)
	}
	s.highestGrant[l.Key] = l.Token
	s.grants[generation{l.Key, l.Token}] = &granted{owner: l.Owner, expires: l.Expires}
	if s.cfg.Workload == Semaphore && strings.HasPrefix(l.Key, slotsPrefix) {
		s.countSlotHoldersLocked()
	}
}

func (s *Sim) renewed(l lease.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gen := generation{l.Key, l.Token}
	if g := s.grants[gen]; g != nil && l.Expires.After(g.expires) {
		g.expires = l.Expires
	}
	if n, ok := s.kept[gen]; ok {
		s.kept[gen] = n + 1
		if n+1 > 1 {
			s.violateLocked(KeptTermEnds, "the backend renewed %stoken %d %d times after Run kept it to expire",
				keyDesc(l.Key), l.Token, n+1)
		}
	}
}

func (s *Sim) released(l lease.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.grants[generation{l.Key, l.Token}]; g != nil {
		g.released = true
	}
}
