package crashtest

import (
	"sync"
	"sync/atomic"
)

// History collects what the clients of a crash test were told: every
// acknowledged acquisition, and counts of the other outcomes for the log.
type History struct {
	Clock atomic.Uint64 // orders sends and acknowledgements across clients

	Held, Renewals, Releases, Unknown atomic.Int64

	mu   sync.Mutex
	acqs []*Acquisition
}

// Add records an acknowledged acquisition.
func (h *History) Add(a *Acquisition) {
	h.mu.Lock()
	h.acqs = append(h.acqs, a)
	h.mu.Unlock()
}

// Len returns how many acquisitions have been recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acqs)
}

// Update runs f, which changes recorded acquisitions, under the history's
// lock.
func (h *History) Update(f func()) {
	h.mu.Lock()
	f()
	h.mu.Unlock()
}

// Snapshot returns a copy of the acquisitions recorded so far.
func (h *History) Snapshot() []Acquisition {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Acquisition, len(h.acqs))
	for i, a := range h.acqs {
		out[i] = *a
	}
	return out
}
