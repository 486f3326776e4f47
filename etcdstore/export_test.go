package etcdstore

import (
	"context"
	"errors"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
)

// BareTxns returns an operation that sends, straight through s's client, the
// two Txns an uncontended Acquire+Release of key sends — the same
// comparisons and operations, built once beforehand for one fixed lease ID
// on one etcd lease — and checks that both took effect. It is etcd's share
// of the Store's pair without the Store's own work, for benchmarks.
func BareTxns(ctx context.Context, s *Store, key, owner string, ttl time.Duration) (func(context.Context) error, error) {
	el, err := s.grant(ctx, 60) // outlives a benchmark's rounds
	if err != nil {
		return nil, err
	}
	id := lease.NewID()
	h := s.firstKey(key)
	cmps := s.freeCmps(key)
	then := []clientv3.Op{clientv3.OpPut(h, holderValue(id, owner, ttl, etcdTTL(ttl, false), s.estimate(el)), clientv3.WithLease(el.id))}
	els := []clientv3.Op{s.firstEntry(key)}
	return func(ctx context.Context) error {
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errors.New("etcdstore: bare acquire Txn found the key taken")
		}
		resp, err = s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(h), "=", resp.Header.Revision)).
			Then(clientv3.OpDelete(h)).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return errors.New("etcdstore: bare release Txn found the key changed")
		}
		return nil
	}, nil
}

// Waiting returns how many entries stand in s's line for key behind the
// first (its holder's): a test that must know a waiter has reached the line
// waits on it instead of sleeping.
func Waiting(ctx context.Context, s *Store, key string) (int, error) {
	resp, err := s.cli.Get(ctx, s.entries(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return max(int(resp.Count)-1, 0), nil
}

// WatchSilenceLimit is how long a watch hears nothing from etcd before it
// breaks.
const WatchSilenceLimit = watchSilenceLimit
