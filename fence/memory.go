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
	mu      sync.Mutex // held across the write
	highest lease.Token
}

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
		r = &memRes{}
		g.res[resource] = r
	}
	g.mu.Unlock()

	r.mu.Lock()
	defer r.mu.Unlock()
	if err := ctx.Err(); err != nil {
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
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}
