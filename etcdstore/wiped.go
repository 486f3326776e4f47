package etcdstore

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leasehq/lease"
)

// Data wiped under a running Store (doc.go, Wiped data): a member's data
// dir emptied, or a cluster made anew on the same endpoints, starts its
// revision again at 1. observe stops the Store at the first response below
// a revision it saw; but once the new cluster has been written past that
// (other applications' keys, another Store's grants), the revision alone
// no longer tells, and a key another Store granted at token 403 was
// granted again at 152. The prefix's store id key, written once and never
// changed, went with the data: every grant's Txn compares it (Acquire:
// no grant unless it holds the Store's id; AcquireWait: read in the same
// Txn, the entry revoked if not), and a watch that hears its change, or
// finds it gone when its etcd falls silent (checkStoreID), stops the
// Store too.

// idCmp holds when the prefix's store id key holds the Store's id.
func (s *Store) idCmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(s.idKey), "=", s.idValue)
}

// idGet reads the prefix's store id key.
func (s *Store) idGet() clientv3.Op { return clientv3.OpGet(s.idKey) }

// checkID stops the Store unless kv, its store id key as read (nil if
// gone), holds the Store's id; doing says what found it.
func (s *Store) checkID(kv *mvccpb.KeyValue, doing string) error {
	if kv != nil && string(kv.Value) == s.idValue {
		return nil
	}
	what := "it is gone"
	if kv != nil {
		what = fmt.Sprintf("it holds %.64q (a Store started on the prefix since)", kv.Value)
	}
	return s.stop(fmt.Errorf("%w: etcdstore: the data under %q was wiped or replaced under this running Store (a member's data dir emptied, "+
		"a cluster made anew on its endpoints, its keys deleted), found %s: its store id key %q does not hold %s, the id this Store serves: %s; "+
		"tokens would come from the new data's revisions, below ones issued before (I1). "+
		"Restore the data (etcdutl snapshot restore --bump-revision, docs/ETCD.md), then restart what serves it; or restart it to serve the new data under a new store id",
		lease.ErrUnavailable, s.prefix, doing, s.idKey, s.idValue, what))
}

// idCheckEvery bounds how often a silent watch reads the store id: at
// most once per Store per interval, as progress is asked.
const idCheckEvery = watchProgressAfter

// checkStoreID reads the store id key for a watch that heard nothing for a
// while (at most once per idCheckEvery for all of the Store's watches),
// and stops the Store if it is gone or another: a watch over data wiped
// and written anew past its revision hears progress, and would otherwise
// show the holders the wipe took for good. It does not wait.
func (s *Store) checkStoreID(ctx context.Context) {
	now := time.Now().UnixNano()
	next := s.idCheckNext.Load()
	if now < next || !s.idCheckNext.CompareAndSwap(next, now+int64(idCheckEvery)) {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(ctx, watchSilenceLimit)
		defer cancel()
		floor := s.maxRev.Load()
		resp, err := s.cli.Get(ctx, s.idKey)
		if err != nil {
			return // the watch's own silence limit deals with an etcd down
		}
		if s.observe(floor, resp.Header) != nil {
			return
		}
		var kv *mvccpb.KeyValue
		if len(resp.Kvs) == 1 {
			kv = resp.Kvs[0]
		}
		_ = s.checkID(kv, "watching")
	}()
}
