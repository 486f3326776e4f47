package pgstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/watchhub"
)

var _ lease.Watcher = (*Store)(nil)

// Watch implements lease.Watcher with LISTEN/NOTIFY. Acquire, Renew and
// Release each NOTIFY the change on the tables' watch channel from the
// statement that makes it, so a notification is sent if and only if the
// change commits, and PostgreSQL delivers notifications in commit order,
// which for one key (its row is locked by each change) is the order of its
// changes. The first Watch of a Store takes a connection out of the pool
// for good and LISTENs on it; the watches of the Store share it.
//
// A watch's state is the rows under the prefix in one MVCC snapshot, read
// after its subscription; it then sends a NOTIFY of its own (a barrier)
// and starts once the listener has received it, when every change
// committed before the snapshot has reached the listener. Each key's state
// and changes are joined by the key's version: its token, the instant of
// its grant or last renewal on the server's clock (expires_at - ttl_ns;
// this assumes the server's clock does not step back between two changes
// of one key), and whether it ended. So nothing is missed or told twice.
//
// Expired is not a write in PostgreSQL: the Store times each lease its
// watchers were told is held on the server's clock (the local clock
// corrected by the offset measured against clock_timestamp() when the
// listener connected), and when that clock reaches the expiry it asks the
// server (one statement for all the keys due) and reports the lease if it
// has expired unrenewed. A successor's acquisition, if it comes first,
// reports the expiry before it. The bound is the timer's delay, the error
// of the measured offset (under one round trip) and one round trip for the
// check: a few milliseconds on a local server.
//
// If the listening connection breaks, every watch breaks with an error
// matching lease.ErrUnavailable (notifications may have been missed); the
// next Watch connects again and starts from the current state. A watcher
// that leaves more than watchhub.DefaultBuffer (1024) events unread is cut
// off the same way.
//
// The cost falls on every change, watched or not: PostgreSQL cannot tell a
// statement whether anybody listens, so each acquire, renew and release
// sends its NOTIFY, and a notifying transaction holds the server's global
// NOTIFY lock from its commit until the commit is done (see doc.go for
// the numbers).
func (s *Store) Watch(ctx context.Context, prefix string) iter.Seq2[lease.Event, error] {
	return watchhub.Watch(ctx, prefix, s.startWatch)
}

// WatchKey implements lease.KeyWatcher: Watch of exactly key, whose
// changes alone reach the watcher's buffer.
func (s *Store) WatchKey(ctx context.Context, key string) iter.Seq2[lease.Event, error] {
	return watchhub.WatchKey(ctx, key, s.startWatch)
}

// watcher is a Store's listening side of Watch: at most one live feed at
// a time, replaced after it breaks.
type watcher struct {
	mu     sync.Mutex
	feed   *watchhub.Feed
	cancel context.CancelFunc // ends the current feed's listener
	wg     sync.WaitGroup     // listeners running
	closed bool
	pid    uint32 // the listening connection's backend PID, for tests
}

func (s *Store) startWatch(ctx context.Context, sc watchhub.Scope) (*watchhub.Sub, error) {
	prefix := sc.Prefix
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	feed, err := s.watchFeed(ctx)
	if err != nil {
		return nil, err
	}
	sub, err := feed.Start(ctx, sc,
		func(ctx context.Context) ([]watchhub.Entry, error) { return s.watchSnapshot(ctx, prefix) },
		func(ctx context.Context) error {
			return feed.WaitBarrier(ctx, func(ctx context.Context, name string) error {
				_, err := s.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, s.n.watchChannel, "b"+name)
				return err
			})
		})
	if err != nil {
		if errors.Is(err, lease.ErrUnavailable) || ctx.Err() != nil {
			return nil, err
		}
		return nil, s.fail(ctx, fmt.Sprintf("watching %q", prefix), err)
	}
	return sub, nil
}

// watchSnapshot reads every row under prefix in one snapshot.
func (s *Store) watchSnapshot(ctx context.Context, prefix string) ([]watchhub.Entry, error) {
	rows, err := s.pool.Query(ctx, s.q.watchSnapshot, prefix)
	if err != nil {
		return nil, err
	}
	var snap []watchhub.Entry
	for rows.Next() {
		var l lease.Lease
		var ttlNS int64
		var expires *time.Time
		if err := rows.Scan(&l.Key, &l.Token, &l.Owner, &ttlNS, &expires); err != nil {
			rows.Close()
			return nil, err
		}
		l.TTL = time.Duration(ttlNS)
		e := watchhub.Entry{Lease: l, Version: watchhub.Version{Token: l.Token, Ended: true}}
		if expires != nil {
			e.Lease.Expires, e.Held = *expires, true
			e.Version = heldVersion(e.Lease)
		}
		snap = append(snap, e)
	}
	return snap, rows.Err()
}

// heldVersion is the version of l, held: the instant of its grant or last
// renewal is its expiry less its TTL, on the server's clock.
func heldVersion(l lease.Lease) watchhub.Version {
	return watchhub.Version{Token: l.Token, At: l.Expires.Add(-l.TTL)}
}

// watchFeed returns the live feed, connecting a listener for a new one if
// there is none or the last one broke.
func (s *Store) watchFeed(ctx context.Context) (*watchhub.Feed, error) {
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, fmt.Errorf("pgstore: %w: %w", lease.ErrUnavailable, errClosed)
	}
	if w.feed != nil && w.feed.Err() == nil {
		return w.feed, nil
	}
	if err := s.refusal(); err != nil {
		return nil, err // its watches were ended (endWatches)
	}
	pc, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	conn := pc.Hijack()
	closeConn := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(ctx)
		cancel()
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.n.watchChannel}.Sanitize()); err != nil {
		closeConn()
		return nil, err
	}
	// The server's clock, to time expiries by: its reading is taken about
	// halfway through the round trip.
	var server time.Time
	sent := time.Now()
	if err := conn.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&server); err != nil {
		closeConn()
		return nil, err
	}
	rtt := time.Since(sent)
	clock := watchhub.OffsetClock{Offset: server.Sub(sent.Add(rtt / 2))}
	var feed *watchhub.Feed
	feed = watchhub.NewFeed(watchhub.New("pgstore", watchhub.DefaultBuffer), clock, func(leases []lease.Lease) {
		s.checkExpiries(feed, leases)
	})
	lctx, cancel := context.WithCancel(context.Background())
	w.feed, w.cancel, w.pid = feed, cancel, conn.PgConn().PID()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer closeConn()
		err := s.listenChanges(lctx, conn, feed)
		if lctx.Err() != nil {
			err = errClosed
		}
		feed.Close(fmt.Errorf("pgstore: watch: the listening connection ended, changes may have been missed; watch again: %w: %w", lease.ErrUnavailable, err))
	}()
	return feed, nil
}

// listenChanges hands the feed every change notified until the connection
// fails or ctx ends.
func (s *Store) listenChanges(ctx context.Context, conn *pgx.Conn, feed *watchhub.Feed) error {
	for {
		msg, err := nextNotification(ctx, conn)
		if err != nil {
			return err
		}
		if name, ok := strings.CutPrefix(msg.Payload, "b"); ok {
			feed.Passed(name)
			continue
		}
		kind, l, err := parseChange(msg.Payload)
		if err != nil {
			return err
		}
		v := heldVersion(l)
		if kind == lease.Released {
			v = watchhub.Version{Token: l.Token, Ended: true}
		}
		feed.Change(kind, l, v)
	}
}

// parseChange reads a change's notification (told in queries.go): kind,
// then TOKEN:EXPIRES_µs:TTL_ns:KEYLEN:KEY OWNER.
func parseChange(p string) (lease.EventKind, lease.Lease, error) {
	bad := func() (lease.EventKind, lease.Lease, error) {
		return 0, lease.Lease{}, fmt.Errorf("malformed change notification %.80q", p)
	}
	if p == "" {
		return bad()
	}
	var kind lease.EventKind
	switch p[0] {
	case 'a':
		kind = lease.Acquired
	case 'n':
		kind = lease.Renewed
	case 'r':
		kind = lease.Released
	default:
		return bad()
	}
	f := strings.SplitN(p[1:], ":", 5)
	if len(f) != 5 {
		return bad()
	}
	tok, err1 := strconv.ParseUint(f[0], 10, 64)
	us, err2 := strconv.ParseInt(f[1], 10, 64)
	ttl, err3 := strconv.ParseInt(f[2], 10, 64)
	n, err4 := strconv.Atoi(f[3])
	if err := errors.Join(err1, err2, err3, err4); err != nil || n < 1 || n > len(f[4]) {
		return bad()
	}
	return kind, lease.Lease{Key: f[4][:n], Owner: f[4][n:], Token: lease.Token(tok),
		TTL: time.Duration(ttl), Expires: time.UnixMicro(us)}, nil
}

// checkExpiries asks the server about leases whose expiry the feed's clock
// reached: one expired unrenewed is reported, one still live timed again.
// A released one, or one with a successor, is left to the notifications,
// which tell the release or (before the successor) the expiry.
func (s *Store) checkExpiries(feed *watchhub.Feed, due []lease.Lease) {
	keys := make([]string, len(due))
	for i, l := range due {
		keys[i] = l.Key
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type row struct {
		token    lease.Token
		live     *time.Time
		released bool
	}
	rows, err := s.pool.Query(ctx, s.q.watchCheck, keys)
	got := map[string]row{}
	if err == nil {
		for rows.Next() {
			var k string
			var r row
			if err = rows.Scan(&k, &r.token, &r.live, &r.released); err != nil {
				rows.Close()
				break
			}
			got[k] = r
		}
		if err == nil {
			err = rows.Err()
		}
	}
	if err != nil {
		// Without an answer an expiry cannot be told: the watchers must
		// learn it, so they break, and start again from the state.
		feed.Close(s.wrap(ctx, "watch: checking expiries", err))
		return
	}
	for _, l := range due {
		r, ok := got[l.Key]
		switch {
		case !ok || r.token != l.Token || r.released:
		case r.live != nil:
			feed.Retrack(l, *r.live)
		default:
			feed.Change(lease.Expired, l, watchhub.Version{Token: l.Token, Ended: true})
		}
	}
}

// endWatches cuts every watch running off with err, and ends their
// listener. A watch started later is refused (ready, and watchFeed for one
// that passed ready before the refusal).
func (s *Store) endWatches(err error) {
	w := &s.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.feed != nil {
		w.feed.Close(err)
	}
	if w.cancel != nil {
		w.cancel()
	}
}

// closeWatch ends the listener, and with it every watch.
func (s *Store) closeWatch() {
	w := &s.watch
	w.mu.Lock()
	w.closed = true
	if w.cancel != nil {
		w.cancel()
	}
	w.mu.Unlock()
	w.wg.Wait()
}
