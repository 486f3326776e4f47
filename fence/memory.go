package fence

import (
	"context"
	"sync"

	"github.com/leasehq/lease"
)

// Memory is an in-memory Guard for resources inside one process. The zero
// value is not usable; call NewMemory.
type Memory struct {
	mode Mode
	mu   sync.Mutex
	res  map[string]*memRes
}

type memRes struct {
	// sem, of capacity one, is the resource's lock, held across the write
	// and taken with a select so that a Check waiting for another write
	// gives up when its context ends.
	sem     chan struct{}
	highest lease.Token // guarded by sem
}

func (r *memRes) lock()   { r.sem <- struct{}{} }
func (r *memRes) unlock() { <-r.sem }

var _ Guard = (*Memory)(nil)

// NewMemory returns an in-memory Guard admitting tokens by mode.
func NewMemory(mode Mode) *Memory {
	return &Memory{mode: mode, res: make(map[string]*memRes)}
}

// Check implements Guard.
func (g *Memory) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	if err := ValidateToken(token); err != nil {
		return err
	}
	g.mu.Lock()
	r := g.res[resource]
	if r == nil {
		r = &memRes{sem: make(chan struct{}, 1)}
		g.res[resource] = r
	}
	g.mu.Unlock()

	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer r.unlock()
	if err := ctx.Err(); err != nil { // both were ready, and select chose the lock
		return err
	}
	if !g.mode.Admits(token, r.highest) {
		return &StaleTokenError{Resource: resource, Token: token, Highest: r.highest, Mode: g.mode}
	}
	if err := write(); err != nil {
		return err
	}
	r.highest = token
	return nil
}

// Highest returns the highest token accepted for resource, 0 if none.
func (g *Memory) Highest(resource string) lease.Token {
	g.mu.Lock()
	r := g.res[resource]
	g.mu.Unlock()
	if r == nil {
		return 0
	}
	r.lock()
	defer r.unlock()
	return r.highest
}
