package leasehttp

import (
	"fmt"
	"strings"
	"sync"

	"github.com/leasehq/lease"
)

// StoreHeader is the answer header that names the store a server serves
// (WithStoreID): replicas of one service send the same value. A Client
// given several servers' URLs refuses an answer whose value differs from
// the first it got, as a server over another store (another etcd cluster
// or key prefix, another boltstore data dir, PostgreSQL database or
// tables, Redis server or namespace) serves other leases: a key held
// through one would look free through the other.
const StoreHeader = "Lease-Store"

// WithStoreID makes every answer carry id in the StoreHeader header: one
// value for every server of one store, and another for each other store
// (the StoreID of etcdstore, boltstore, pgstore and redisstore, which lease
// serve gives). It is printable ASCII without spaces, at most 128 bytes.
// Without it the header is not sent, and Clients check nothing.
func WithStoreID(id string) ServerOption {
	return func(c *serverConfig) error {
		if id == "" || len(id) > 128 || strings.IndexFunc(id, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 {
			return fmt.Errorf("%w: leasehttp: store id %q is not 1-128 bytes of printable ASCII without spaces", lease.ErrInvalid, id)
		}
		c.storeID = id
		return nil
	}
}

// storeSeen is the store a Client's first answer named, against which the
// answers of its other servers are checked.
type storeSeen struct {
	mu   sync.Mutex
	id   string // "" until an answer names one
	base string // the server that named it
}

// check returns an error matching lease.ErrUnavailable if id, the
// StoreHeader of an answer from base, names another store than the first
// answer that named one; "" (a server without WithStoreID, an older one)
// is not checked.
func (s *storeSeen) check(base, id string) error {
	if id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.id {
	case "":
		s.id, s.base = id, base
		return nil
	case id:
		return nil
	}
	return fmt.Errorf("%w: leasehttp: %s serves another store than %s (%s %q, not %q): the servers listed must be replicas of one store (the same --backend; the embedded store has one server); its answer is not used",
		lease.ErrUnavailable, base, s.base, StoreHeader, id, s.id)
}
