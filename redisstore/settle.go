package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
)

// An acquire script whose caller gives up may still run and grant a lease
// that nobody knows the ID of, held until its TTL: go-redis sends a call
// and then reads its reply on past a cancelled ctx (and a deadline too,
// unless ContextTimeoutEnabled), or closes the connection at the deadline
// (with ContextTimeoutEnabled) after the server has the script, or drops
// the reply of a pipelined call whose caller left. So no caller's ctx
// reaches the script call: it runs on the Store's life, for at most
// acquireBound, while the caller waits for its reply or for ctx's end,
// whichever comes first; a grant to a caller that left is released at
// once. A call that fails without a reply from the server (after go-redis'
// own retries, which find an earlier run's grant by its ID) may have
// granted: it is settled, by releasing whatever lease carries its ID
// (release.lua given the ID alone as its proof), tried again while the
// server cannot be reached, for the lease's TTL. A release can end only the
// lease that call granted. What it cannot reach: a script that the server
// receives only after the release ran (held up in the network for longer
// than go-redis' timeouts and retries), which is then held until its TTL.

// acquireBound bounds an acquire script call that no caller can cancel.
const acquireBound = 30 * time.Second

// acquireOnce runs acquire.lua for key with the ID ids, owner and TTL (ms,
// and as asked: ttl) and returns the lease value it answers, or ctx's
// error at once if ctx ends first. A call still queued then is never sent
// (batcher.call). A ctx that cannot end (Done is nil) cannot give up, so
// its call runs in the caller's goroutine, with nothing to wait for it:
// one goroutine hand-over less, which at one caller on the 2-vCPU test
// machine cost about 9% of the acquire+release pairs a second.
func (s *Store) acquireOnce(ctx context.Context, key, ids, owner string, ms int64, ttl time.Duration) (string, error) {
	if ctx.Done() == nil {
		if s.bg.Context().Err() != nil {
			return "", fmt.Errorf("redisstore: acquire %q: %w: the store is closed", key, lease.ErrUnavailable)
		}
		r, e := s.acquireCall(s.bg.Context(), ctx, key, ids, owner, ms, ttl)
		return s.acquired(key, r, e)
	}
	var (
		mu   sync.Mutex
		left bool // the caller gave up
		res  string
		err  error
	)
	done := make(chan struct{})
	started := s.bg.Go(func(life context.Context) {
		r, e := s.acquireCall(life, ctx, key, ids, owner, ms, ttl)
		mu.Lock()
		res, err = r, e
		gone := left
		close(done)
		mu.Unlock()
		if gone && e == nil && ownedBy(r, ids) {
			s.releaseByID(key, ids, ttl)
		}
	})
	if !started {
		return "", fmt.Errorf("redisstore: acquire %q: %w: the store is closed", key, lease.ErrUnavailable)
	}
	select {
	case <-done:
	case <-ctx.Done():
		mu.Lock()
		select {
		case <-done: // the reply came after all
		default:
			left = true
		}
		mu.Unlock()
		if left {
			return "", fmt.Errorf("redisstore: acquire %q: gave up waiting for the reply; a lease granted meanwhile is released: %w", key, ctx.Err())
		}
	}
	return s.acquired(key, res, err)
}

// acquireCall makes the script call of acquireOnce on the Store's life
// (life), bounded by acquireBound, ctx bounding only its wait in the
// batcher's queue; a call that got no reply may have granted, and is
// settled.
func (s *Store) acquireCall(life, ctx context.Context, key, ids, owner string, ms int64, ttl time.Duration) (string, error) {
	actx, cancel := context.WithTimeout(life, acquireBound)
	defer cancel()
	r, e := s.batch.call(ctx, actx, true, acquireScript, s.acquireKeys(key), s.acquireArgs(ids, owner, ms)...).Text()
	if e != nil && !answered(e) && !errors.Is(e, errNotSent) {
		s.settle(key, ids, ttl) // whether it granted is unknown
	}
	return r, e
}

// acquireArgs are acquire.lua's arguments for a grant with the ID ids,
// owner and TTL (ms).
func (s *Store) acquireArgs(ids, owner string, ms int64) []any {
	return []any{ids, owner, ms, s.changesArg, s.aofArg, s.idArg}
}

// acquired turns the reply of acquireOnce's call into its answer.
func (s *Store) acquired(key, res string, err error) (string, error) {
	if errors.Is(err, errNotSent) { // ctx ended as it left the queue
		return "", fmt.Errorf("redisstore: acquire %q: %w", key, err)
	}
	if err != nil && redis.HasErrorPrefix(err, "redisstore: appendonly is off") {
		return "", fmt.Errorf("%w: %w: acquire %q: %w", ErrVolatile, lease.ErrUnavailable, key, err)
	}
	if err != nil && redis.HasErrorPrefix(err, idRefusedPrefix) {
		msg := strings.TrimPrefix(err.Error(), "ERR ")
		return "", &idRefused{found: strings.TrimPrefix(msg, idRefusedPrefix)}
	}
	if err != nil {
		return "", s.fail(context.Background(), "acquire", key, err)
	}
	return res, nil
}

// answered reports whether err is the server's reply (an error reply:
// the script did not grant), not a failure to hear one.
func answered(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// ownedBy reports whether the lease value v carries the ID ids.
func ownedBy(v, ids string) bool {
	return len(v) > len(ids) && v[1:1+len(ids)] == ids
}

// releaseByID releases, in the background, the lease on key if it carries
// the ID ids, for at most ttl.
func (s *Store) releaseByID(key, ids string, ttl time.Duration) {
	s.bg.Go(func(life context.Context) {
		ctx, cancel := context.WithTimeout(life, ttl)
		defer cancel()
		_ = s.releaseID(ctx, key, ids)
	})
}

// releaseID runs release.lua with the ID alone as its proof: it ends the
// lease on key that carries ids, whatever its token.
func (s *Store) releaseID(ctx context.Context, key, ids string) error {
	return s.batch.run(ctx, releaseScript, []string{s.leaseKey(key)}, ids, s.channelArg, key, s.changesArg).Err()
}

// settle releases the lease on key carrying ids, if there is one, trying
// again while the server cannot be reached, for at most ttl: a grant has
// expired by then.
func (s *Store) settle(key, ids string, ttl time.Duration) {
	s.bg.Retry(time.Now().Add(ttl), func(ctx context.Context) bool {
		err := s.releaseID(ctx, key, ids)
		return err == nil || answered(err)
	})
}
