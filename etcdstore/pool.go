package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
)

// etcdLease is an etcd lease as the Store tracks it. Each is attached to at
// most one generation (or one waiter) at a time, so keeping it alive or
// letting it expire affects that lease.Lease alone. Between generations it
// sits, with no keys, in the Store's pool for reuse: that saves a Grant per
// acquisition and a Revoke per release.
type etcdLease struct {
	id   clientv3.LeaseID
	secs int64     // the TTL etcd granted, in seconds
	sent time.Time // send time of the last grant or keep-alive: etcd keeps the lease at least until sent+secs
	seen time.Time // receive time of the same: etcd expires it about seen+secs

	// While it carries a generation of this Store (Store.held): its token,
	// its entry's etcd key, and the entry's mod revision as of this Store's
	// last write of it.
	token  lease.Token
	entry  string
	modRev int64
}

// safeUntil is when etcd may expire the lease at the earliest.
func (el *etcdLease) safeUntil() time.Time { return el.sent.Add(time.Duration(el.secs) * time.Second) }

// expires estimates, on the local clock, when etcd will expire the lease if
// it is not kept alive: the value reported as lease.Lease.Expires.
func (el *etcdLease) expires() time.Time { return el.seen.Add(time.Duration(el.secs) * time.Second) }

// keepAliveDue is when a waiter keeps its etcd lease alive next: a third of
// its etcd TTL after the last keep-alive was sent, as etcd's own Session
// does.
func (el *etcdLease) keepAliveDue() time.Time {
	return el.sent.Add(time.Duration(el.secs) * time.Second / 3)
}

// etcdTTL maps a lease TTL to the etcd lease TTL used for it: whole seconds
// (etcd's granularity) rounded up. A tight lease (AcquireWait's: elections,
// queues) gets just that, so that after a crash its successor takes over
// as soon as etcd would for an etcd lease of the TTL. Otherwise
// (Acquire's) one second more, so that an idle pooled etcd lease taken up
// to a second after its last refresh still outlives the asked TTL without
// a keep-alive. Expiry is therefore never earlier than asked, and at most
// about 1 s (tight) or 2 s (plus etcd's 0.5 s expiry check) later.
func etcdTTL(ttl time.Duration, tight bool) int64 {
	secs := int64((ttl + time.Second - 1) / time.Second)
	if tight {
		return secs
	}
	return secs + 1
}

// poolCap bounds the idle leases kept per TTL; more are revoked.
const poolCap = 128

// errLeaseGone means etcd no longer has the lease: it expired or was revoked.
var errLeaseGone = errors.New("etcdstore: etcd lease expired or revoked")

// take returns an etcd lease with no keys that etcd keeps at least ttl from
// now, of etcdTTL(ttl, tight): an idle one from the pool, refreshed if
// needed, or a new grant.
func (s *Store) take(ctx context.Context, ttl time.Duration, tight bool) (*etcdLease, error) {
	el, _, err := s.takeEarly(ctx, ttl, tight, false)
	return el, err
}

// takeEarly is take for a caller that sends its Txn at once. With early
// set, a pooled etcd lease that etcd keeps for now but not for the whole
// TTL is returned with its keep-alive under way (ref), sent alongside the
// caller's Txn rather than before it: a client acquiring every few seconds
// then waits for one round trip instead of two. The lease is not vouched
// for until ref.wait says so; if etcd expires it before the keep-alive
// arrives, the Txn was refused (etcd refuses a Put on an etcd lease it no
// longer has) or what it created went with it.
func (s *Store) takeEarly(ctx context.Context, ttl time.Duration, tight, early bool) (el *etcdLease, ref *refresh, err error) {
	secs := etcdTTL(ttl, tight)
	for {
		s.mu.Lock()
		list := s.pool[secs]
		if len(list) == 0 {
			s.mu.Unlock()
			break
		}
		el := list[len(list)-1]
		s.pool[secs] = list[:len(list)-1]
		s.mu.Unlock()
		now := time.Now()
		if !el.safeUntil().Before(now.Add(ttl)) {
			return el, nil, nil
		}
		if early && now.Before(el.safeUntil()) {
			return el, s.refreshAsync(ctx, el), nil
		}
		// Idle too long to vouch for the TTL: one keep-alive (served by the
		// leader from memory, no Raft write) makes it as good as new.
		if err := s.keepAlive(ctx, el); err == nil {
			return el, nil, nil
		} else if !errors.Is(err, errLeaseGone) {
			return nil, nil, err
		}
	}
	el, err = s.grant(ctx, secs)
	return el, nil, err
}

// grant returns a new etcd lease of secs seconds.
func (s *Store) grant(ctx context.Context, secs int64) (*etcdLease, error) {
	sent := time.Now()
	resp, err := s.cli.Grant(ctx, secs)
	if err != nil {
		return nil, fmt.Errorf("granting an etcd lease: %w", err)
	}
	return &etcdLease{id: resp.ID, secs: resp.TTL, sent: sent, seen: time.Now()}, nil
}

// keepAlive refreshes el, returning errLeaseGone if etcd no longer has it.
func (s *Store) keepAlive(ctx context.Context, el *etcdLease) error {
	return s.refreshed(el, s.sendKeepAlive(ctx, el.id))
}

// keptAlive is the outcome of one keep-alive.
type keptAlive struct {
	sent, seen time.Time
	secs       int64
	err        error // errLeaseGone if etcd no longer has the lease
}

// sendKeepAlive keeps etcd lease id alive once. It touches no etcdLease, so
// it may run beside a caller that reads one.
func (s *Store) sendKeepAlive(ctx context.Context, id clientv3.LeaseID) keptAlive {
	if s.beforeKeepAlive != nil {
		if err := s.beforeKeepAlive(id); err != nil {
			return keptAlive{err: err}
		}
	}
	sent := time.Now()
	resp, err := s.cli.KeepAliveOnce(ctx, id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return keptAlive{err: errLeaseGone}
	}
	if err != nil {
		return keptAlive{err: fmt.Errorf("keeping etcd lease %x alive: %w", int64(id), err)}
	}
	return keptAlive{sent: sent, seen: time.Now(), secs: resp.TTL}
}

// refreshed records keep-alive k on el, or returns its error.
func (s *Store) refreshed(el *etcdLease, k keptAlive) error {
	if k.err != nil {
		return k.err
	}
	s.mu.Lock()
	el.sent, el.seen, el.secs = k.sent, k.seen, k.secs
	s.mu.Unlock()
	return nil
}

// refresh is a keep-alive of an etcd lease under way (takeEarly).
type refresh struct {
	s    *Store
	el   *etcdLease
	done chan keptAlive
}

func (s *Store) refreshAsync(ctx context.Context, el *etcdLease) *refresh {
	r := &refresh{s: s, el: el, done: make(chan keptAlive, 1)}
	go func() { r.done <- s.sendKeepAlive(ctx, el.id) }()
	return r
}

// wait waits for the keep-alive and records it on the lease, returning its
// error; a nil refresh has none.
func (r *refresh) wait() error {
	if r == nil {
		return nil
	}
	return r.s.refreshed(r.el, <-r.done)
}

// give puts el, which must have no keys attached, back in the pool.
func (s *Store) give(el *etcdLease) {
	s.mu.Lock()
	if !s.closed && len(s.pool[el.secs]) < poolCap {
		s.pool[el.secs] = append(s.pool[el.secs], el)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.revoke(el.id)
}

// revoke revokes an etcd lease, deleting whatever is attached to it, on a
// best-effort basis: if etcd cannot be reached the lease expires by itself.
// It is used where an operation's outcome is unknown, so that a generation
// we may have created does not block the key for a whole TTL.
func (s *Store) revoke(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = s.cli.Revoke(ctx, id)
}

// lost disposes of el, taken for an acquisition whose Txn failed with err:
// back to the pool if the Txn was never sent, else revoked for sure, as
// the Txn may have attached a generation to it.
func (s *Store) lost(el *etcdLease, err error) {
	if errors.Is(err, errNotSent) {
		s.give(el)
		return
	}
	s.revokeSurely(el)
}

// revokeSurely revokes el, which may carry a generation nobody will hear
// of (an acquisition whose outcome is unknown, a wait given up as it was
// granted): once at once, as revoke does, and if etcd cannot be reached
// (a member lost, a leader being elected), again in the background until
// it can or el has expired by itself. An etcd lease that exists no more
// cannot have a generation attached later: a Txn naming it is refused, so
// the revoke ends exactly what the acquisition may have made. Without the
// retries, a revoke tried within a leader election left the generation
// held by nobody until its TTL (1 of 2 acquisitions given up as the leader
// was killed, in a trial). A new leader renews every etcd lease for its
// TTL, so the background tries go on for twice el's TTL and 5 s more.
func (s *Store) revokeSurely(el *etcdLease) {
	if s.tryRevoke(context.Background(), el.id) {
		return
	}
	s.bg.Retry(time.Now().Add(2*time.Duration(el.secs)*time.Second+5*time.Second), func(ctx context.Context) bool {
		return s.tryRevoke(ctx, el.id)
	})
}

// tryRevoke revokes id within a second of ctx and reports whether it is
// gone: revoked now, or unknown to etcd (expired, or revoked before).
func (s *Store) tryRevoke(ctx context.Context, id clientv3.LeaseID) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := s.cli.Revoke(ctx, id)
	return err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

// hold records el as the etcd lease of the generation with secret id and
// token tok, whose entry (etcd key entry) this Store last wrote, or read,
// at mod revision modRev.
func (s *Store) hold(id lease.ID, el *etcdLease, tok lease.Token, entry string, modRev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el.token, el.entry, el.modRev = tok, entry, modRev
	s.held[id] = el
	// Generations that expired instead of being released leave entries
	// behind; drop those long past their expiry now and then.
	if now := time.Now(); len(s.held) > 1024 && now.Sub(s.lastSweep) > time.Second {
		s.lastSweep = now
		for k, v := range s.held {
			if now.Sub(v.expires()) > time.Minute {
				delete(s.held, k)
			}
		}
	}
}

// generation returns the token, entry key and entry mod revision of the
// generation with secret id, if this Store granted or renewed it.
func (s *Store) generation(id lease.ID) (tok lease.Token, entry string, modRev int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el := s.held[id]; el != nil && el.token != 0 {
		return el.token, el.entry, el.modRev, true
	}
	return 0, "", 0, false
}

// unhold forgets and returns the etcd lease of the generation with secret
// id, if it is the one etcd has attached (cur).
func (s *Store) unhold(id lease.ID, cur clientv3.LeaseID) *etcdLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.held[id]
	delete(s.held, id)
	if el == nil || el.id != cur {
		return nil
	}
	el.token, el.entry, el.modRev = 0, "", 0
	return el
}

// unheld forgets and returns the etcd lease of the generation with secret
// id, which this Store granted and has just deleted (nil if forgotten
// meanwhile).
func (s *Store) unheld(id lease.ID) *etcdLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	el := s.held[id]
	delete(s.held, id)
	if el != nil {
		el.token, el.entry, el.modRev = 0, "", 0
	}
	return el
}

// heldLease returns a private copy of the tracked etcd lease of generation
// id if etcd has it attached (cur), or a record for cur that this Store did
// not grant. A copy, never the tracked record itself: a Release running
// meanwhile may put that record back in the pool and another generation
// take it, and the caller (Renew) writes to what it gets and records it
// for id again.
func (s *Store) heldLease(id lease.ID, cur clientv3.LeaseID, secs int64) *etcdLease {
	s.mu.Lock()
	defer s.mu.Unlock()
	if el := s.held[id]; el != nil && el.id == cur {
		c := *el
		return &c
	}
	return &etcdLease{id: cur, secs: secs}
}
