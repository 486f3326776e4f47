package chaos

import (
	"errors"
	"fmt"
	"sync"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// register is the protected resource of one key.
type register interface {
	// Write stores value if token is admitted; a rejection is an error
	// matching lease.ErrStaleToken.
	Write(token lease.Token, value string) error
	// Read returns the value and the token that wrote it.
	Read() (string, lease.Token)
}

// guarded is the real guard: fence.Resource.
type guarded struct{ r *fence.Resource[string] }

func (g guarded) Write(token lease.Token, value string) error { return g.r.Write(token, value) }
func (g guarded) Read() (string, lease.Token)                 { return g.r.Read() }

// unguarded takes every write: the negative control. It records the token of
// the last write, as a resource that trusted its writers would.
type unguarded struct {
	mu    sync.Mutex
	value string
	token lease.Token
}

func (u *unguarded) Write(token lease.Token, value string) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.value, u.token = value, token
	return nil
}

func (u *unguarded) Read() (string, lease.Token) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.value, u.token
}

func newRegister(key string, mode fence.Mode, off bool) register {
	if off {
		return &unguarded{}
	}
	return guarded{fence.NewResource(key, "", mode)}
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
