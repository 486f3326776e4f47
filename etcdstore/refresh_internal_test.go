package etcdstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
)

// stalePool returns a Store whose pool holds one etcd lease for a 10 s TTL
// that was last refreshed 5 s ago: etcd still keeps it for about 6 s, not
// for the TTL, so the next Acquire must refresh it. txnSent is closed when
// the Store sends its next Txn.
func stalePool(t *testing.T) (s *Store, cli *clientv3.Client, txnSent <-chan struct{}) {
	t.Helper()
	s, cli, el := storeWithOnePooled(t)
	s.mu.Lock()
	el.sent = el.sent.Add(-5 * time.Second)
	el.seen = el.seen.Add(-5 * time.Second)
	s.mu.Unlock()
	sent := make(chan struct{})
	var once sync.Once
	s.batch.beforeSend = func([]*txnReq) { once.Do(func() { close(sent) }) }
	return s, cli, sent
}

// awaitTxn waits until the acquisition's Txn was sent and has created the
// holder key of "k", and returns its create revision (the token).
func awaitTxn(ctx context.Context, s *Store, txnSent <-chan struct{}) (int64, error) {
	select {
	case <-txnSent:
	case <-time.After(5 * time.Second):
		return 0, errors.New("the keep-alive waited for a Txn that was not sent: it went first")
	}
	var rev int64
	var getErr error
	err := poll.Err(5*time.Second, func() error {
		resp, err := s.cli.Get(ctx, s.entries("k"), clientv3.WithPrefix())
		if err != nil {
			getErr = err
			return nil
		}
		if len(resp.Kvs) != 1 {
			return errors.New("the Txn created no generation")
		}
		rev = resp.Kvs[0].CreateRevision
		return nil
	})
	if getErr != nil {
		return 0, getErr
	}
	return rev, err
}

// A pooled etcd lease that needs a keep-alive gets it beside the Txn, not
// before it: the keep-alive below waits until the Txn has been sent, which
// a keep-alive sent first never sees. The lease it returns is vouched for
// from the keep-alive on.
func TestAcquireRefreshesAStalePooledLeaseBesideItsTxn(t *testing.T) {
	s, _, txnSent := stalePool(t)
	var keepAlives atomic.Int32
	s.beforeKeepAlive = func(clientv3.LeaseID) error {
		keepAlives.Add(1)
		_, err := awaitTxn(testCtx(t), s, txnSent)
		return err
	}
	start := time.Now()
	l, err := s.Acquire(testCtx(t), "k", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := keepAlives.Load(); n != 1 {
		t.Errorf("%d keep-alives, want 1", n)
	}
	if min := start.Add(10 * time.Second); l.Expires.Before(min) {
		t.Errorf("Expires %v is less than the TTL after the call (%v): the refresh was not recorded", l.Expires, min)
	}
	s.mu.Lock()
	el := s.held[l.ID]
	s.mu.Unlock()
	if el == nil || el.sent.Before(start) {
		t.Fatalf("the generation's etcd lease is not tracked as refreshed during the call: %+v", el)
	}
	got, err := s.Get(testCtx(t), "k")
	if err != nil || got.Token != l.Token {
		t.Fatalf("Get = %+v, %v; want the acquired token %d", got, err, l.Token)
	}
}

// If etcd expires the pooled etcd lease after the Txn created a generation
// on it but before the keep-alive arrives, that generation went with it:
// Acquire must not return it, and tries once more on a new etcd lease.
func TestAcquireWhoseEtcdLeaseExpiresBeforeItsKeepAlive(t *testing.T) {
	s, cli, txnSent := stalePool(t)
	var first int64
	s.beforeKeepAlive = func(id clientv3.LeaseID) error {
		rev, err := awaitTxn(testCtx(t), s, txnSent)
		if err != nil {
			return err
		}
		first = rev
		_, err = cli.Revoke(testCtx(t), id) // as an expiry would
		return err
	}
	l, err := s.Acquire(testCtx(t), "k", "o", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if first == 0 || int64(l.Token) <= first {
		t.Fatalf("Acquire returned token %d; the generation that died with its etcd lease had %d", l.Token, first)
	}
	got, err := s.Get(testCtx(t), "k")
	if err != nil || got.Token != l.Token {
		t.Fatalf("Get = %+v, %v; want the acquired token %d", got, err, l.Token)
	}
	if err := s.Release(testCtx(t), l); err != nil {
		t.Fatal(err)
	}
}

// If the keep-alive fails otherwise, whether etcd keeps the etcd lease for
// the TTL is unknown: Acquire ends the generation it created and fails.
func TestAcquireWhoseKeepAliveFails(t *testing.T) {
	s, _, txnSent := stalePool(t)
	s.beforeKeepAlive = func(clientv3.LeaseID) error {
		if _, err := awaitTxn(testCtx(t), s, txnSent); err != nil {
			return err
		}
		return errors.New("injected keep-alive failure")
	}
	_, err := s.Acquire(testCtx(t), "k", "o", 10*time.Second)
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Acquire = %v, want an error matching ErrUnavailable", err)
	}
	if got, err := s.Get(testCtx(t), "k"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("after the failed Acquire, Get = %+v, %v; want ErrNotFound: the generation must be ended", got, err)
	}
	s.beforeKeepAlive = nil
	l, err := s.Acquire(testCtx(t), "k", "o", 10*time.Second)
	if err != nil {
		t.Fatalf("the key is not free again: %v", err)
	}
	if err := s.Release(testCtx(t), l); err != nil {
		t.Fatal(err)
	}
}
