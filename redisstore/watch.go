package redisstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/watchhub"
)

var _ lease.Watcher = (*Store)(nil)

// Watch implements lease.Watcher with pub/sub. The acquire, renew and
// release scripts PUBLISH each change on the namespace's changes channel
// (NS:changes) in the same atomic step as the change, and Redis sends a
// channel's messages to a subscriber in the order it ran the scripts. The
// first Watch of a Store subscribes (one connection, shared by its
// watches); on Redis Cluster a PUBLISH reaches every node, so the
// subscription may sit on any.
//
// A watch subscribes first, then reads its state: SCAN for the token
// counters under the prefix (one per key ever leased) and, per key, the
// lease and its counter in one MGET. It then PUBLISHes a barrier (on
// Cluster, one on each master) and starts once the subscription has
// received it, when every change made before the reads has arrived. Each key's state and changes are joined by
// the key's version: its token, the server's TIME at the grant or last
// renewal (kept in the lease value; this assumes the server's clock does
// not step back between two changes of one key, as Redis' own PX expiry
// does), and whether it ended; a free key's version is its counter. So
// nothing is missed or told twice.
//
// Expiry is Redis' PX, which publishes nothing (keyspace notifications
// would need the server's configuration, and come only when Redis gets
// round to deleting the key). The Store times each lease its watchers were
// told is held on the server's clock (the local clock corrected by the
// offset measured against TIME when it subscribed) and, when that clock
// reaches the expiry, runs expire.lua for the key: if the lease is gone
// and no later token was issued, the script PUBLISHes its expiry on the
// same channel, after any release's message, so a released lease is told
// released; if the lease is still there, its remaining PX time times it
// again. A successor's acquisition, if it comes first, reports the expiry
// before it. The bound is the timer's delay, the error of the measured
// offset (under one round trip) and one round trip for the script: a few
// milliseconds on a local server.
//
// If the subscription drops (or stays silent through a PING), every watch
// breaks with an error matching lease.ErrUnavailable; the next Watch
// subscribes again and starts from the current state. A watcher that
// leaves more than watchhub.DefaultBuffer (1024) events unread is cut off
// the same way.
//
// Every change PUBLISHes, watched or not: a script cannot tell whether
// anybody listens anywhere (PUBSUB NUMSUB counts one node's subscribers
// only), and a PUBLISH nobody receives costs the server a lookup (see
// doc.go for the numbers). Like the state List reads, the state a watch
// reads costs a SCAN of the whole keyspace.
func (s *Store) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return watchhub.Watch(ctx, prefix, s.startWatch)
}

// WatchKey implements lease.KeyWatcher: Watch of exactly key, whose
// changes alone reach the watcher's buffer.
func (s *Store) WatchKey(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
	return watchhub.WatchKey(ctx, key, s.startWatch)
}

// watcher is a Store's subscription for Watch: at most one live feed at a
// time, replaced after it breaks.
type watcher struct {
	mu     sync.Mutex
	feed   *watchhub.Feed
	ps     *redis.PubSub
	wg     sync.WaitGroup // readers running
	closed bool
}

func (s *Store) startWatch(ctx context.Context, sc watchhub.Scope) (*watchhub.Sub, error) {
	prefix := sc.Prefix
	if err := s.refused(); err != nil {
		return nil, err
	}
	feed, err := s.watchFeed(ctx)
	if err != nil {
		if r := s.refused(); r != nil {
			return nil, r
		}
		return nil, s.fail(ctx, "watch", prefix, err)
	}
	sub, err := feed.Start(ctx, sc,
		func(ctx context.Context) ([]watchhub.Entry, error) { return s.watchSnapshot(ctx, prefix) },
		func(ctx context.Context) error { return s.barrier(ctx, feed) })
	if err != nil {
		if r := s.refused(); r != nil {
			return nil, r
		}
		if errors.Is(err, lease.ErrUnavailable) {
			return nil, err
		}
		return nil, s.fail(ctx, "watch", prefix, err)
	}
	return sub, nil
}

// barrier waits until every change made before it began has reached the
// feed. A node sends its own messages to a subscriber in order, but on
// Redis Cluster a message published on one master reaches a subscriber on
// another over that master's cluster bus link: a barrier published on each
// master follows that master's earlier messages.
func (s *Store) barrier(ctx context.Context, feed *watchhub.Feed) error {
	publish := func(c redis.Cmdable) error {
		return feed.WaitBarrier(ctx, func(ctx context.Context, name string) error {
			return c.Publish(ctx, s.ns+changesSuffix, "b"+name).Err()
		})
	}
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return publish(s.rdb)
	}
	var masters []*redis.Client
	var mu sync.Mutex
	if err := cc.ForEachMaster(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		masters = append(masters, c)
		mu.Unlock()
		return nil
	}); err != nil {
		return err
	}
	for _, c := range masters {
		if err := publish(c); err != nil {
			return err
		}
	}
	return nil
}

// watchSnapshot reads the state of every key ever leased under prefix,
// and the store id with it: a watch of a namespace wiped under the Store
// (the first since, or lease.Follow's after the restart of a server that
// lost its data) would show the data in its place as the Store's, and is
// refused instead (wiped.go). The GET rides in the pipeline of the MGETs.
func (s *Store) watchSnapshot(ctx context.Context, prefix string) ([]watchhub.Entry, error) {
	var keys []string
	if err := s.scan(ctx, s.counterPattern(prefix), func(name string) {
		if k, ok := s.userKeyOf(name, counterSuffix); ok && strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}); err != nil {
		return nil, err
	}
	slices.Sort(keys)
	keys = slices.Compact(keys) // SCAN may return a key twice
	cmds := make([]*redis.SliceCmd, len(keys))
	var idCmd *redis.StringCmd
	if _, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if s.idArg != "" {
			idCmd = p.Get(ctx, s.ns+storeIDSuffix)
		}
		for i, k := range keys {
			cmds[i] = p.MGet(ctx, s.keyPair(k)...) // one slot: atomic
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	if idCmd != nil {
		id, err := idCmd.Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if id != s.id {
			return nil, s.wipedErr("watching", s.ns+storeIDSuffix, id)
		}
	}
	snap := make([]watchhub.Entry, 0, len(keys))
	for i, k := range keys {
		vals := cmds[i].Val()
		if len(vals) != 2 {
			return nil, s.malformed("watch", k, fmt.Errorf("MGET returned %d values", len(vals)))
		}
		if v, ok := vals[0].(string); ok {
			lv, err := parseValue(v)
			if err != nil {
				return nil, s.malformed("watch", k, err)
			}
			l := lv.lease(k)
			snap = append(snap, watchhub.Entry{Lease: l, Held: true, Version: heldVersion(l)})
			continue
		}
		c, _ := vals[1].(string)
		tok, err := strconv.ParseUint(c, 10, 64)
		if err != nil {
			return nil, s.malformed("watch", k, fmt.Errorf("token counter %q", c))
		}
		snap = append(snap, watchhub.Entry{Lease: lease.Lease{Key: k, Token: lease.Token(tok)},
			Version: watchhub.Version{Token: lease.Token(tok), Ended: true}})
	}
	return snap, nil
}

// heldVersion is the version of l, held: its grant's or last renewal's
// TIME, which is its expiry less its TTL.
func heldVersion(l lease.Lease) watchhub.Version {
	return watchhub.Version{Token: l.Token, At: l.Expires.Add(-l.TTL)}
}

// watchFeed returns the live feed, subscribing for a new one if there is
// none or the last one broke.
func (s *Store) watchFeed(ctx context.Context) (*watchhub.Feed, error) {
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errClosed
	}
	if err := s.refused(); err != nil {
		return nil, err // its watches were ended, or are being (endWatches)
	}
	if w.feed != nil && w.feed.Err() == nil {
		return w.feed, nil
	}
	ps := s.rdb.Subscribe(ctx)
	if err := ps.Subscribe(ctx, s.ns+changesSuffix); err != nil {
		_ = ps.Close()
		return nil, err
	}
	// Subscribe only sends SUBSCRIBE: its confirmation says the server
	// will send every message published from now on.
	if _, err := ps.ReceiveTimeout(ctx, healthInterval); err != nil {
		_ = ps.Close()
		return nil, err
	}
	// The server's clock, to time expiries by: its reading is taken about
	// halfway through the round trip.
	sent := time.Now()
	server, err := s.rdb.Time(ctx).Result()
	if err != nil {
		_ = ps.Close()
		return nil, err
	}
	rtt := time.Since(sent)
	clock := watchhub.OffsetClock{Offset: server.Sub(sent.Add(rtt / 2))}
	var feed *watchhub.Feed
	feed = watchhub.NewFeed(watchhub.New("redisstore", watchhub.DefaultBuffer), clock, func(leases []lease.Lease) {
		s.checkExpiries(feed, leases)
	})
	w.feed, w.ps = feed, ps
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		err := s.readChanges(ps, feed)
		_ = ps.Close()
		if s.watchClosed() {
			err = errClosed
		}
		feed.Close(fmt.Errorf("redisstore: watch: the subscription dropped, changes may have been missed; watch again: %w: %w", lease.ErrUnavailable, err))
	}()
	return feed, nil
}

func (s *Store) watchClosed() bool {
	s.watch.mu.Lock()
	defer s.watch.mu.Unlock()
	return s.watch.closed
}

// readChanges hands the feed every change published until the
// subscription fails (or is silent through a PING).
func (s *Store) readChanges(ps *redis.PubSub, feed *watchhub.Feed) error {
	ctx := context.Background()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, healthInterval)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && !pinged {
				pinged = true
				if err = ps.Ping(ctx); err == nil {
					continue
				}
			}
			return err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Message:
			if name, ok := strings.CutPrefix(m.Payload, "b"); ok {
				feed.Passed(name)
				continue
			}
			kind, l, err := s.parseChange(m.Payload)
			if err != nil {
				return err
			}
			if known, ok := feed.Known(l.Key); ok && l.Token < known.Token {
				// Tokens of a key only rise: its keys were lost, and
				// the feed would drop this change as one it knows.
				s.wentBack(feed, l.Key, fmt.Sprintf("a change at token %d, below the token %d the watchers know", l.Token, known.Token))
				return errWentBack
			}
			v := heldVersion(l)
			if kind == lease.Released || kind == lease.Expired {
				v = watchhub.Version{Token: l.Token, Ended: true}
			}
			feed.Change(kind, l, v)
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				// go-redis resubscribed after a drop it did not report:
				// messages may have been lost.
				return errors.New("resubscribed after a drop")
			}
		}
	}
}

// parseChange reads a change's message: kind, the lease key's length,
// ':', its name, then the lease value without W and ID (a, n, r) or the
// token (x: expired).
func (s *Store) parseChange(p string) (lease.EventKind, lease.Lease, error) {
	bad := func() (lease.EventKind, lease.Lease, error) {
		return 0, lease.Lease{}, fmt.Errorf("malformed change message %.80q", p)
	}
	if p == "" {
		return bad()
	}
	kinds := map[byte]lease.EventKind{'a': lease.Acquired, 'n': lease.Renewed, 'r': lease.Released, 'x': lease.Expired}
	kind, ok := kinds[p[0]]
	n, rest, ok2 := strings.Cut(p[1:], ":")
	size, err := strconv.Atoi(n)
	if !ok || !ok2 || err != nil || size < 1 || size > len(rest) {
		return bad()
	}
	key, ok := s.userKeyOf(rest[:size], leaseSuffix)
	if !ok {
		return bad()
	}
	rest = rest[size:]
	if kind == lease.Expired {
		tok, err := strconv.ParseUint(rest, 10, 64)
		if err != nil {
			return bad()
		}
		return kind, lease.Lease{Key: key, Token: lease.Token(tok)}, nil
	}
	v, err := parseValue(string(unwanted) + strings.Repeat("0", idLen) + rest)
	if err != nil {
		return bad()
	}
	return kind, v.lease(key), nil
}

// checkExpiries runs expire.lua for each lease whose expiry the feed's
// clock reached: a lease gone unrenewed is published expired (and comes
// back through the subscription), one still live is timed again. A key
// whose token counter is gone, or below the token the watchers were told
// is held, or whose lease is one of a lower token, has lost its keys, and
// the watchers would show the lease held for good (the lower token's
// grant, older to the feed, was dropped): the Store reads its store id,
// and refuses if the namespace was wiped (wiped.go); else (keys deleted
// by hand, a volatile server emptied) the watchers break, to start again
// from the data in place.
func (s *Store) checkExpiries(feed *watchhub.Feed, due []lease.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range due {
		res, err := expireScript.Run(ctx, s.rdb, s.keyPair(l.Key), strconv.FormatUint(uint64(l.Token), 10), s.changesArg).Result()
		if err != nil {
			// Without an answer an expiry cannot be told: the watchers
			// must learn it, so they break and start again from the state.
			feed.Close(s.fail(ctx, "watch: checking the expiry of", l.Key, err))
			return
		}
		var found string // what shows the key lost its keys, if anything
		switch r := res.(type) {
		case string: // gone: published if expired; r is its counter
			if c, err := strconv.ParseUint(r, 10, 64); err != nil || c < uint64(l.Token) {
				found = fmt.Sprintf("its token counter %q after its lease, told held at token %d, was gone", r, l.Token)
			}
		case []any:
			var v string
			var left int64
			if len(r) == 2 {
				v, _ = r[0].(string)
				left, _ = r[1].(int64)
			}
			lv, err := parseValue(v)
			if err != nil {
				feed.Close(s.malformed("watch", l.Key, fmt.Errorf("expire.lua returned %v", res)))
				return
			}
			switch {
			case lv.token == l.Token:
				feed.Retrack(l, feed.Clock().Now().Add(time.Duration(left)*time.Millisecond))
			case lv.token < l.Token:
				found = fmt.Sprintf("its lease at token %d, below the token %d told held", lv.token, l.Token)
			}
		default:
			feed.Close(s.malformed("watch", l.Key, fmt.Errorf("expire.lua returned %v", res)))
			return
		}
		if found != "" {
			s.wentBack(feed, l.Key, found)
			return
		}
	}
}

// errWentBack ends readChanges once wentBack has closed the feed.
var errWentBack = errors.New("redisstore: watch: a key's token went back")

// wentBack answers a sign that key's keys were lost under the watches of
// feed (found says what it was): its token counter gone, or a token below
// one the watchers know. The Store reads its store id: if the namespace
// was wiped it refuses from now on, and the watches end with the refusal
// (wiped.go); else (keys deleted by hand, a volatile server emptied) they
// break, to start again from the data in place.
func (s *Store) wentBack(feed *watchhub.Feed, key, found string) {
	ctx, cancel := context.WithTimeout(context.Background(), healthInterval)
	defer cancel()
	refusal, err := s.checkStoreID(ctx, fmt.Sprintf("watching %q (%s)", key, found))
	switch {
	case refusal != nil:
		feed.Close(refusal) // endWatches does too, in the background
	case err != nil:
		feed.Close(s.fail(ctx, "watch: reading the store id, as the watch of", key, fmt.Errorf("%s: %w", found, err)))
	default:
		feed.Close(fmt.Errorf("redisstore: watch: %w: %q shows %s: "+
			"its keys were deleted or replaced under the watch; watch again", lease.ErrUnavailable, key, found))
	}
}

// endWatches cuts every watch running off with err, the Store's refusal,
// and ends their subscription. A watch started later is refused
// (startWatch, and watchFeed for one that passed startWatch's check
// before the refusal).
func (s *Store) endWatches(err error) {
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.feed != nil {
		w.feed.Close(err)
	}
	if w.ps != nil {
		_ = w.ps.Close()
	}
}

// closeWatch ends the subscription, and with it every watch.
func (s *Store) closeWatch() {
	w := &s.watch
	w.mu.Lock()
	w.closed = true
	ps := w.ps
	w.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
	}
	w.wg.Wait()
}
