package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// Register is the protected resource of one key: a value and the token that
// wrote it, behind a guard.
type Register interface {
	// Write stores value if token is admitted; a rejection is an error
	// matching lease.ErrStaleToken. Any other error is a failure of the run:
	// a register must be on a server the faults do not touch.
	Write(ctx context.Context, token lease.Token, value string) error
	// Read returns the value and the token that wrote it ("" and 0 before
	// the first write).
	Read(ctx context.Context) (string, lease.Token, error)
}

// memoryGuard is the in-process guard, fence.Resource: the register of
// engines that name no Guard.
type memoryGuard struct{ r *fence.Resource[string] }

func (g memoryGuard) Write(_ context.Context, token lease.Token, value string) error {
	return g.r.Write(token, value)
}

func (g memoryGuard) Read(context.Context) (string, lease.Token, error) {
	v, tok := g.r.Read()
	return v, tok, nil
}

// unguarded takes every write: the negative control. It records the token of
// the last write, as a resource that trusted its writers would.
type unguarded struct {
	mu    sync.Mutex
	value string
	token lease.Token
}

func (u *unguarded) Write(_ context.Context, token lease.Token, value string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.value, u.token = value, token
	return nil
}

func (u *unguarded) Read(context.Context) (string, lease.Token, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.value, u.token, nil
}

func newRegister(t testing.TB, e Engine, key string, mode fence.Mode, off bool) Register {
	switch {
	case off:
		return &unguarded{}
	case e.Guard != nil:
		return e.Guard(t, key, mode)
	}
	return memoryGuard{fence.NewResource(key, "", mode)}
}

// accepted reports whether err from register.Write is an acceptance (nil)
// or a rejection (a stale token); anything else is a bug in the run.
func accepted(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, lease.ErrStaleToken):
		return false, nil
	}
	return false, fmt.Errorf("chaos: register write failed: %w", err)
}
