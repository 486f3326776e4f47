package electionbench_test

import (
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// uniquePrefix is a key prefix no other run uses.
func uniquePrefix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "electionbench/" + hex.EncodeToString(b[:]) + "/"
}

// newSession returns an etcd session of ttl seconds on a client of its own
// (as a process of its own would have), closed when b ends.
func newSession(b *testing.B, eps []string, ttl int) *concurrency.Session {
	s, err := concurrency.NewSession(etcdtest.NewClient(b, eps), concurrency.WithTTL(ttl))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// newElector returns an Elector of ttl on an etcdstore Store under prefix,
// on client cli, the Store closed when b ends.
func newElector(b *testing.B, cli *clientv3.Client, prefix string, ttl time.Duration) *election.Elector {
	s, err := etcdstore.New(cli, etcdstore.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	e, err := electorOf(s, ttl)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// won is when a Campaign returned, and how.
type won struct {
	at  time.Time
	err error
}

// electorOn is an Elector on a Store of its own, or why there is none.
type electorOn struct {
	store *etcdstore.Store
	el    *election.Elector
	err   error
}

// newElectorOn is newElector without a testing.B, for a Store that ends
// before the benchmark does.
func newElectorOn(cli *clientv3.Client, prefix string, ttl time.Duration) electorOn {
	s, err := etcdstore.New(cli, etcdstore.WithPrefix(prefix))
	if err != nil {
		return electorOn{err: err}
	}
	e, err := electorOf(s, ttl)
	if err != nil {
		_ = s.Close()
		return electorOn{err: err}
	}
	return electorOn{store: s, el: e}
}

// electorOf is an Elector on a Client of its own on s.
func electorOf(s lease.Backend, ttl time.Duration) (*election.Elector, error) {
	c, err := lease.NewClient(s)
	if err != nil {
		return nil, err
	}
	return election.New(c, ttl)
}
