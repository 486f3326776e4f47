package fence

import (
	"sync"

	"github.com/leasehq/lease"
)

// Resource is a value of type T guarded by fencing tokens: the seed's
// FencedResource, safe for concurrent use. A write is accepted only if its
// token is admitted by the mode; a rejected write changes nothing.
type Resource[T any] struct {
	name    string
	mode    Mode
	mu      sync.Mutex
	value   T
	highest lease.Token
}

// NewResource returns a resource called name holding initial, admitting
// tokens by mode.
func NewResource[T any](name string, initial T, mode Mode) *Resource[T] {
	return &Resource[T]{name: name, mode: mode, value: initial}
}

// Write stores v if token is admitted, and records token as the highest
// accepted. Otherwise it returns a *StaleTokenError and changes nothing.
func (r *Resource[T]) Write(token lease.Token, v T) error {
	return r.Update(token, func(T) (T, error) { return v, nil })
}

// Update replaces the value with f's result if token is admitted, atomically
// with the check. If f fails, nothing changes. f must not write r: the
// nested call would wait for the lock its caller holds, forever.
func (r *Resource[T]) Update(token lease.Token, f func(old T) (T, error)) error {
	if err := ValidateToken(token); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mode.Admits(token, r.highest) {
		return &StaleTokenError{Resource: r.name, Token: token, Highest: r.highest, Mode: r.mode}
	}
	v, err := f(r.value)
	if err != nil {
		return err
	}
	r.value, r.highest = v, token
	return nil
}

// Read returns the value and the highest token accepted so far.
func (r *Resource[T]) Read() (value T, lastToken lease.Token) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.highest
}
