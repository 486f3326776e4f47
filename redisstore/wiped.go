package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
)

// A namespace wiped under a running Store (doc.go, Wipes): every grant
// checks in acquire.lua that the store id, on Cluster its hash slot's
// copy, is the Store's. A refusal comes back as an *idRefused, which
// mendStoreID answers: on a single server the Store refuses from then on
// (wipedErr); on Cluster the store id key itself is asked, and the copy
// written if it holds the Store's id, read again after the write, so that a
// wipe between the first read and the write cannot leave a copy vouching
// for a wiped slot.
//
// A Store that grants nothing learns it too, where the data shows a sign
// of it (checkStoreID): a watch's state is read with the store id
// (watchSnapshot); a Renew or Release that finds its lease gone, and a
// watched lease's expiry check that finds its token counter gone or below
// the token the watchers were told, read it. Bump checks it before, in
// and after its writes (bump.go). Once the Store refuses, its watches end
// with the refusal (endWatches), as they would otherwise show the leases
// the wipe took, or another Store's grants on the new data, tokens from 1
// again, as this Store's.

// idRefusedPrefix begins acquire.lua's refusal of a grant whose store
// id (or its slot's copy) is not the Store's; what it found follows.
const idRefusedPrefix = "redisstore: store id: "

// idRefused is acquire.lua's refusal, with what the store id key (or the
// slot's copy) held instead of the Store's id: "" if nothing.
type idRefused struct{ found string }

func (e *idRefused) Error() string {
	return fmt.Sprintf("redisstore: the store id is not this Store's (found %q)", e.found)
}

// mendTries bounds the rounds of mendStoreID and grant of one Acquire.
const mendTries = 3

// refused returns the error every operation of a Store whose namespace was
// found wiped answers, or nil.
func (s *Store) refused() error {
	if p := s.wiped.Load(); p != nil {
		return *p
	}
	return nil
}

// mendStoreID answers acquire.lua's refusal r of a grant of key:
// on a single server the store id key itself is gone or another, and the
// Store refuses from now on; on Cluster, the slot's copy is written if the
// store id key still holds the Store's id (nil: grant again), else the
// Store refuses from now on.
func (s *Store) mendStoreID(ctx context.Context, key string, r *idRefused) error {
	if !s.cluster {
		return s.wipedErr(fmt.Sprintf("granting %q", key), s.ns+storeIDSuffix, r.found)
	}
	check := func() error {
		truth, err := s.rdb.Get(ctx, s.ns+storeIDSuffix).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return s.fail(ctx, "acquire", key, fmt.Errorf("reading the store id: %w", err))
		}
		if truth != s.id {
			return s.wipedErr(fmt.Sprintf("granting %q", key), s.ns+storeIDSuffix, truth)
		}
		return nil
	}
	if err := check(); err != nil {
		return err
	}
	if s.beforeCopy != nil {
		s.beforeCopy()
	}
	if err := s.rdb.Set(ctx, s.acquireKeys(key)[3], s.id, 0).Err(); err != nil {
		return s.fail(ctx, "acquire", key, fmt.Errorf("writing the hash slot's copy of the store id: %w", err))
	}
	return check()
}

// checkStoreID reads the store id key, where the data showed a sign of a
// wipe (doing says where), and returns the Store's lasting refusal if it
// is gone or another; nil if it holds the Store's id, if the Store serves
// a volatile server (AllowVolatile: a wipe is served), or if it cannot be
// read (err then says why).
func (s *Store) checkStoreID(ctx context.Context, doing string) (refusal, err error) {
	if s.idArg == "" {
		return nil, nil
	}
	id, err := s.rdb.Get(ctx, s.ns+storeIDSuffix).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if id != s.id {
		return s.wipedErr(doing, s.ns+storeIDSuffix, id), nil
	}
	return nil, nil
}

// wipedErr makes the Store's lasting refusal, found doing what doing says
// (granting a key, say): the store id key idKey holds found (nothing if ""),
// not the Store's id. The first one ends the Store's watches.
func (s *Store) wipedErr(doing, idKey, found string) error {
	what := "it is gone"
	switch {
	case found == "":
	case len(found) == 32 && strings.Trim(found, "0123456789abcdef") == "":
		what = "it holds " + found + " (a Store started on the namespace since)"
	default:
		what = fmt.Sprintf("it holds %.64q", found)
	}
	e := fmt.Errorf("redisstore: %w: the namespace %q was wiped under this running Store (FLUSHALL, FLUSHDB, its keys deleted, "+
		"or a server restarted without its data), found %s: its store id key %s does not hold %s, the id this Store serves: %s; "+
		"the token counters went with it, and its tokens would start again below ones this Store issued (I1). "+
		"Restore the data and run lease bump, then restart what serves it; or restart it to serve the new, empty data under a new store id",
		lease.ErrUnavailable, s.ns, doing, idKey, s.id, what)
	if s.wiped.CompareAndSwap(nil, &e) {
		// Not here: a watch being started holds the watcher's lock
		// through its SUBSCRIBE, and the caller may be that watch.
		s.bg.Go(func(context.Context) { s.endWatches(e) })
	}
	return *s.wiped.Load()
}
