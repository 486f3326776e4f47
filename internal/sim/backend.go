package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/leasehq/lease"
)

// simBackend is client i's view of the backend: every call is a message on
// the simulated network, applied to the one memstore on delivery. It offers
// only lease.Backend, so the Client polls.
type simBackend struct {
	s *Sim
	c *simClient
}

func (b *simBackend) name() string { return fmt.Sprintf("c%d.%d", b.c.idx, b.c.gen) }

func (b *simBackend) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	v, err := b.s.send(ctx, b.c, toBackend, b.name()+" acquire", func() (any, error) {
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
	v, err := b.s.send(ctx, b.c, toBackend, fmt.Sprintf("%s renew token %d", b.name(), l.Token), func() (any, error) {
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
	_, err := b.s.send(ctx, b.c, toBackend, fmt.Sprintf("%s release token %d", b.name(), l.Token), func() (any, error) {
		return nil, b.s.store.Release(context.Background(), l)
	})
	return err
}

func (b *simBackend) Get(ctx context.Context, key string) (lease.Lease, error) {
	return b.s.store.Get(ctx, key)
}

func (b *simBackend) List(ctx context.Context, prefix string) ([]lease.Lease, error) {
	return b.s.store.List(ctx, prefix)
}

// grant records a grant at the backend: tokens must rise strictly.
func (s *Sim) grant(l lease.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Token <= s.granted && s.violation == "" {
		s.violation = fmt.Sprintf("the backend granted token %d after token %d", l.Token, s.granted)
		s.tracefLocked("VIOLATION: %s", s.violation)
	}
	s.granted = l.Token
	s.expiry[l.Token] = l.Expires
}

func (s *Sim) renewed(l lease.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Expires.After(s.expiry[l.Token]) {
		s.expiry[l.Token] = l.Expires
	}
}
