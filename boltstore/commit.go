package boltstore

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
)

// maxYields is how many times the commit loop yields the processor, while
// collecting a batch, for callers about to send; measured on 2 vCPUs, two
// raised the mean batch at 32 clients from ~13 to ~25 operations.
const maxYields = 2

// opKind names a write operation run by the commit loop.
type opKind uint8

const (
	opAcquire opKind = iota
	opAcquireWait
	opRenew
	opRelease
	opRenewBatch  // renewals, each made as an opRenew, in one op (RenewBatch)
	opExpire      // a waiter's timer: hand an expired key to its first waiter
	opWatch       // a watch's subscription and snapshot (watch.go)
	opWatchExpire // a watched lease's timer: report its expiry (watch.go)
)

// op is one write operation and, once done is closed, its outcome.
type op struct {
	kind  opKind
	ctx   context.Context // opAcquireWait: queue only while ctx is live
	key   string
	owner string
	ttl   time.Duration
	l     lease.Lease // opRenew, opRelease
	w     *waiter     // opAcquireWait
	timer uint64      // opExpire: the arming it answers
	watch *watchOp    // opWatch, opWatchExpire
	// opRenewBatch: its renewals, and their results, one each, in order
	// (the op's own err is for a batch that failed whole).
	renewals []lease.Renewal
	results  []lease.RenewResult

	res    lease.Lease
	err    error
	queued bool // opAcquireWait: w was queued; its grant comes on w.ch
	early  bool // opRelease: answered before its batch is durable (see answerReleases)
	done   chan struct{}
}

// txn is the store's open write transaction, into which every batch is
// applied; its writes are recorded in the log as they are made (see
// wal.go), and committed to the bbolt file at checkpoints.
type txn struct {
	tx     *bolt.Tx
	meta   *bolt.Bucket
	leases *bolt.Bucket
	wal    *wal
	grants []*grant     // this batch's hand-overs to waiters, delivered once it is durable
	cur    *bolt.Cursor // on leases, for getLease
	owner  string       // the last owner getLease read, reused while the next is the same
	key    []byte       // leaseRecord's key, reused: bbolt and the log copy it
}

// put writes key in bucket b (meta or leases), and records it in the log.
func (t *txn) put(b *bolt.Bucket, key, value []byte) error {
	if err := b.Put(key, value); err != nil {
		return err
	}
	t.wal.add(t.walBucket(b), 'p', key, value)
	return nil
}

// delete deletes key from bucket b, and records it in the log.
func (t *txn) delete(b *bolt.Bucket, key []byte) error {
	if err := b.Delete(key); err != nil {
		return err
	}
	t.wal.add(t.walBucket(b), 'd', key, nil)
	return nil
}

func (t *txn) walBucket(b *bolt.Bucket) byte {
	if b == t.meta {
		return 'm'
	}
	return 'l'
}

type grant struct {
	w   *waiter
	res result
}

// submit hands o to the commit loop and waits for its outcome. Once taken by
// the loop an operation is always answered, after its commit, whatever ctx
// does meanwhile: abandoning it would leave its outcome unknown.
func (s *Store) submit(ctx context.Context, o *op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	o.done = make(chan struct{})
	select {
	case s.ops <- o:
	case <-s.quit:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	<-o.done
	return nil
}

// run is the commit loop, the store's only writer. It takes every operation
// waiting to be sent, applies them in order in the open write transaction
// (so each one's outcome is decided exactly as if they ran one by one),
// makes them durable with one log record and one fdatasync, and only then
// answers them all; now and then it checkpoints. A lone operation is made
// durable at once; under load, operations that arrive during a sync share
// the next.
func (s *Store) run() {
	defer close(s.stopped)
	tick := time.NewTicker(s.checkpointEvery)
	defer tick.Stop()
	batch := make([]*op, 0, maxBatch)
	for {
		select {
		case o := <-s.ops:
			batch = append(batch[:0], o)
		case req := <-s.snapshots:
			s.takeSnapshot(req)
			continue
		case <-tick.C:
			if s.checkpointDue() {
				s.checkpoint()
			} else {
				s.idleSweep()
			}
			continue
		case <-s.quit:
			s.closeLive()
			return
		}
		// Callers answered by the last commit are runnable but may not have
		// sent their next operation yet. Yielding lets them, so batches fill
		// under load; a lone caller pays at most two trips through the
		// scheduler, never a timed delay.
		for yields := 0; len(batch) < maxBatch; {
			select {
			case o := <-s.ops:
				batch = append(batch, o)
				continue
			default:
			}
			if yields == maxYields {
				break
			}
			yields++
			runtime.Gosched()
		}
		s.commit(batch)
		clear(batch)
		if s.checkpointDue() {
			s.checkpoint()
		}
	}
}

// checkpointDue reports whether the log holds records and it is time to
// commit them to the bbolt file: checkpointEvery since the last checkpoint,
// or a log past checkpointBytes.
func (s *Store) checkpointDue() bool {
	return s.wal.off > 0 && (s.checkpointAlways || s.wal.off >= checkpointBytes || time.Since(s.lastCheckpoint) >= s.checkpointEvery)
}

// checkpoint commits the open write transaction to the bbolt file (fsynced:
// bbolt's two fdatasyncs), raising the log's epoch in the same commit, and
// starts the log over and a new transaction. Readers wait meanwhile.
func (s *Store) checkpoint() {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.failure() != nil {
		return
	}
	epoch := s.wal.epoch + 1
	meta := s.live.tx.Bucket(bucketMeta)
	_, err := s.sweep(s.live)
	if err == nil {
		err = s.clearQuiet(s.live)
	}
	if err == nil {
		err = putMeta(meta, keyWALEpoch, epoch)
	}
	if err == nil {
		err = s.live.tx.Commit() // a failed commit rolls back
	} else {
		// Ended here: an open write transaction holds bbolt's writer
		// lock, which Close waits for.
		_ = s.live.tx.Rollback()
	}
	s.live = nil
	if err != nil {
		// The transaction is rolled back. What it held is in the log,
		// durably: a reopen replays it.
		s.fail(unavailablef(err, "boltstore: checkpoint of %s failed; the store refuses further use until it is reopened", s.path))
		return
	}
	s.wal.restart(epoch)
	s.lastCheckpoint = time.Now()
	s.checkpoints.Add(1)
	if s.live, err = s.begin(); err != nil {
		s.fail(err)
	}
}

// closeLive ends the open transaction as the loop stops: a last checkpoint,
// or, after a failure, a rollback (the log keeps what was durable).
func (s *Store) closeLive() {
	if s.failure() == nil && s.wal.off > 0 {
		s.checkpoint()
	}
	s.txMu.Lock()
	defer s.txMu.Unlock()
	if s.live != nil {
		_ = s.live.tx.Rollback()
		s.live = nil
	}
}

// commit applies batch in the open transaction, makes its writes durable
// in the log, and answers every operation.
func (s *Store) commit(batch []*op) {
	var t *txn // set once the batch is applied
	err := s.failure()
	if err == nil {
		t = s.live
		s.txMu.Lock()
		s.wmu.Lock()
		for _, o := range batch {
			s.apply(t, o)
		}
		s.wmu.Unlock()
		if t.wal.pending() {
			s.durMu.Lock()
			s.applied++
			s.durMu.Unlock()
		}
		s.txMu.Unlock()
		err = s.finish(t, batch)
		s.publishWatch(batch, err)
	}
	if err != nil {
		// Nothing of the batch is durable, and outcomes decided inside the
		// transaction may rest on its undone writes: every operation fails.
		s.wmu.Lock()
		for _, o := range batch {
			if o.queued {
				s.dequeue(o.key, o.w)
			}
		}
		s.wmu.Unlock()
		for _, o := range batch {
			if !o.early {
				o.res, o.err, o.queued = lease.Lease{}, err, false
			}
		}
		if t != nil {
			for _, g := range t.grants {
				g.res = result{err: err}
			}
		}
	}
	if t != nil {
		for _, g := range t.grants {
			g.w.ch <- g.res // buffered; the waiter was dequeued so gets exactly one
		}
		clear(t.grants)
		t.grants = t.grants[:0]
	}
	for _, o := range batch {
		if !o.early {
			close(o.done)
		}
	}
}

// answerReleases answers the batch's releases before its log record is
// durable. A release needs no durability: lost in a crash, it leaves the
// lease held until its TTL, which is safe (I3 holds, and no token is
// involved). Its caller is spared the fdatasync, and its next operation can
// be in the queue before this one ends, in time for the next batch. Reads
// see the open transaction, where the release is already applied, and Get
// and List wait for its batch to be durable, so nobody told a lease is
// released reads it back as held. If the log write fails, the store fails
// every later operation, and on reopen the lease is held until its TTL, as
// if the release had been lost.
func (s *Store) answerReleases(batch []*op) {
	for _, o := range batch {
		if o.kind == opRelease {
			o.early = true
			close(o.done)
		}
	}
}

func (s *Store) begin() (*txn, error) {
	tx, err := s.db.Begin(true)
	if err != nil {
		return nil, unavailablef(err, "boltstore: write transaction on %s", s.path)
	}
	t := &txn{tx: tx, meta: tx.Bucket(bucketMeta), leases: tx.Bucket(bucketLeases), wal: s.wal}
	if t.meta == nil || t.leases == nil {
		_ = tx.Rollback()
		return nil, unavailablef(nil, "boltstore: %s lost its buckets", s.path)
	}
	return t, nil
}

// finish makes the batch's writes durable: one log record, one fdatasync.
// A batch of failed operations (a try that found the key held, a stale
// renew) writes nothing and costs no fsync. The batch's releases are
// answered first.
func (s *Store) finish(t *txn, batch []*op) error {
	s.answerReleases(batch)
	if !t.wal.pending() {
		return nil
	}
	if s.syncHook != nil {
		s.syncHook()
	}
	write := t.wal.write
	if s.noLog {
		write = s.commitLive
	}
	err := write()
	if errors.Is(err, errLogFull) {
		// The log keeps the size the file recorded (wal.go): a record
		// that does not fit is made durable by a checkpoint instead.
		t.wal.buf = t.wal.buf[:0]
		s.checkpoint()
		err = s.failure()
	}
	if err != nil {
		// After a failed write or fdatasync the log's state on disk is
		// unknown (the kernel may have dropped pages it could not write),
		// and the open transaction holds writes that may never be
		// durable, so building on either could break I1 at the next crash:
		// stop, and let a reopen recover from what is on disk.
		err = unavailablef(err, "boltstore: %s: the batch could not be made durable; the store refuses further use until it is reopened", s.path)
		s.fail(err)
		return err
	}
	s.commits.Add(1)
	s.durMu.Lock()
	s.durable = s.applied
	s.durCond.Broadcast()
	s.durMu.Unlock()
	return nil
}

// commitLive makes the batch durable without the log (noLog): it commits
// the open transaction, bbolt's two fdatasyncs, and begins the next.
// Readers wait meanwhile, as they do for a checkpoint.
func (s *Store) commitLive() error {
	s.txMu.Lock()
	defer s.txMu.Unlock()
	s.wal.buf = s.wal.buf[:0] // the batch's entries, which no log will hold
	err := s.live.tx.Commit()
	s.live = nil
	if err != nil {
		return err
	}
	s.live, err = s.begin()
	return err
}

// fail makes every later operation fail with err, wakes readers waiting
// for durability, and answers queued waiters with the failure, as no
// grant will come to them before the store is reopened.
func (s *Store) fail(err error) {
	s.failed.CompareAndSwap(nil, &err)
	s.watch.close(s.failure())
	s.durMu.Lock()
	s.durCond.Broadcast()
	s.durMu.Unlock()
	s.wmu.Lock()
	s.failWaiters(s.failure())
	s.wmu.Unlock()
}

// apply decides o inside t. Errors it stores in o that match lease.ErrHeld or
// ErrNotHeld are outcomes; errors matching ErrUnavailable mean the store
// itself failed.
func (s *Store) apply(t *txn, o *op) {
	now := s.now()
	switch o.kind {
	case opAcquire, opAcquireWait:
		rec, held, err := s.current(t, o.key, now)
		if err != nil {
			o.err = err
			return
		}
		if !held {
			o.res, o.err = s.grant(t, o.key, o.owner, o.ttl, now)
			return
		}
		if o.kind == opAcquire || o.ctx.Err() != nil {
			o.err = rec.heldError(o.key)
			return
		}
		s.enqueue(o.key, o.w, rec.expires, now)
		o.queued = true
	case opRenew:
		o.res, o.err = s.renew(t, o.l, o.ttl, now)
	case opRenewBatch:
		s.renewOrder = renewalOrder(s.renewOrder, o.renewals)
		for _, i := range s.renewOrder {
			r, res := &o.renewals[i], &o.results[i]
			res.Lease, res.Err = s.renew(t, r.Lease, r.TTL, now)
		}
	case opRelease:
		rec, held, err := s.current(t, o.l.Key, now)
		switch {
		case err != nil:
			o.err = err
		case !held || rec.token != o.l.Token || rec.id != o.l.ID:
			o.err = lease.ErrNotHeld
		default:
			if err := s.fold(t, o.l.Key, rec.token); err != nil {
				o.err = err
				return
			}
			s.noteWatch(lease.Released, rec.lease(o.l.Key))
			// A failed hand-over is the waiter's to hear about (its grant
			// carries the error); the release itself stands.
			_ = s.handOver(t, o.l.Key, now)
		}
	case opExpire:
		q := s.waiters[o.key]
		if q == nil || q.timer == nil || q.timerGen != o.timer {
			return // answered already, or replaced by another arming
		}
		q.timer = nil
		rec, held, err := s.current(t, o.key, now)
		switch {
		case err != nil:
			o.err = err
		case held:
			s.rearm(o.key, rec.expires, now) // renewed since it was armed, or handed over
		}
	case opWatch, opWatchExpire:
		s.applyWatch(t, o, now)
	}
}

// renewalOrder returns the indexes of renewals in the order of their keys
// (a key's renewals in their own order), in order's memory: a batch
// renewed in that order walks the B-tree from one key to its neighbour,
// through pages the walk before has just read, where request order (a
// Client's holds by due time) jumps about the tree. Each result still goes
// to its request's index.
func renewalOrder(order []int, renewals []lease.Renewal) []int {
	order = order[:0]
	sorted := true
	for i := range renewals {
		order = append(order, i)
		if i > 0 && renewals[i].Lease.Key < renewals[i-1].Lease.Key {
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(order, func(a, b int) int {
			if c := strings.Compare(renewals[a].Lease.Key, renewals[b].Lease.Key); c != 0 {
				return c
			}
			return a - b
		})
	}
	return order
}

// renew renews l for ttl from now, if it is still held.
func (s *Store) renew(t *txn, l lease.Lease, ttl time.Duration, now time.Time) (lease.Lease, error) {
	rec, held, err := s.current(t, l.Key, now)
	switch {
	case err != nil:
		return lease.Lease{}, err
	case !held || rec.token != l.Token || rec.id != l.ID:
		return lease.Lease{}, lease.ErrNotHeld
	}
	quiet := ttl <= rec.ttl // see quiet.go
	rec.ttl = ttl
	rec.expires = now.Add(ttl)
	if quiet {
		err = s.putQuiet(t, l.Key, rec, now)
	} else {
		err = s.putLease(t, l.Key, rec)
	}
	if err != nil {
		return lease.Lease{}, err
	}
	res := rec.lease(l.Key)
	s.noteWatch(lease.Renewed, res)
	s.rearm(l.Key, rec.expires, now)
	return res, nil
}

// current returns key's lease and whether it is live at now. A key found
// free (released or expired) while waiters queue is handed to the first of
// them, so that nobody arriving later can barge ahead of the queue; the record
// returned is then that waiter's.
func (s *Store) current(t *txn, key string, now time.Time) (record, bool, error) {
	rec, ok, err := t.getLease(key)
	if err != nil {
		return record{}, false, err
	}
	if ok && rec.live(now) {
		return rec, true, nil
	}
	if ok {
		s.noteExpired(key, rec)
	}
	if len(s.queueOf(key)) == 0 {
		return record{}, false, nil
	}
	if err := s.handOver(t, key, now); err != nil {
		return record{}, false, err
	}
	return t.getLease(key)
}

// handOver grants the free key to its first waiter, if any.
func (s *Store) handOver(t *txn, key string, now time.Time) error {
	w := s.popWaiter(key)
	if w == nil {
		return nil
	}
	l, err := s.grant(t, key, w.owner, w.ttl, now)
	t.grants = append(t.grants, &grant{w: w, res: result{l: l, err: err}})
	if err != nil {
		return err
	}
	s.rearm(key, l.Expires, now)
	return nil
}

// fold deletes key's lease record, of token, and raises the floor to
// token: the record was the key's high-water mark, and the floor keeps it
// (I1) for this key and every other, in the same batch.
func (s *Store) fold(t *txn, key string, token lease.Token) error {
	if err := t.delete(t.leases, []byte(key)); err != nil {
		return unavailablef(err, "boltstore: delete lease %q", key)
	}
	if uint64(token) <= s.floor {
		return nil
	}
	s.floor = uint64(token)
	if err := t.put(t.meta, keyTokenFloor, seal(keyTokenFloor, encodeUint64(s.floor))); err != nil {
		return unavailablef(err, "boltstore: raise the token floor")
	}
	return nil
}

// grant issues a new generation on key: the next token above the key's
// last (the token of its lease record, live or expired, if it has one)
// and the store's floor, which holds the last tokens of the keys without
// one, a fresh secret ID, expiry ttl after now.
func (s *Store) grant(t *txn, key, owner string, ttl time.Duration, now time.Time) (lease.Lease, error) {
	var last uint64
	if rec, ok, err := t.getLease(key); err != nil {
		return lease.Lease{}, err
	} else if ok {
		last = uint64(rec.token)
	}
	last = max(last, s.floor)
	if last >= uint64(lease.MaxToken) {
		return lease.Lease{}, unavailablef(nil, "boltstore: tokens of key %q are exhausted at %d", key, last)
	}
	rec := record{token: lease.Token(last + 1), expires: now.Add(ttl), ttl: ttl, id: lease.NewID(), owner: owner}
	if err := s.putLease(t, key, rec); err != nil {
		return lease.Lease{}, err
	}
	l := rec.lease(key)
	s.noteWatch(lease.Acquired, l)
	return l, nil
}

func (s *Store) putLease(t *txn, key string, rec record) error {
	k, v := t.leaseRecord(key, rec)
	if err := t.put(t.leases, k, v); err != nil {
		return unavailablef(err, "boltstore: store lease %q", key)
	}
	return nil
}

// leaseRecord returns key, in t's reused buffer (bbolt and the log copy
// it), and rec sealed under it.
func (t *txn) leaseRecord(key string, rec record) (k, v []byte) {
	t.key = append(t.key[:0], key...)
	return t.key, rec.encode(t.key)
}

// getLease is getLease of the leases bucket, through a cursor kept for
// the transaction: bbolt's Bucket.Get makes a cursor, and grows its stack
// from nothing, on every call. Seek finds the key afresh from the root,
// so writes in between do not matter. The key's bytes, for the Seek and
// the record's checksum, are t's key buffer (leaseRecord's, which is free
// between two puts): converted for the checksum, they were allocated on
// every read.
func (t *txn) getLease(key string) (record, bool, error) {
	if t.cur == nil {
		t.cur = t.leases.Cursor()
	}
	t.key = append(t.key[:0], key...)
	k, v := t.cur.Seek(t.key)
	if v == nil || string(k) != key {
		return record{}, false, nil
	}
	rec, err := decodeRecordOwner(key, t.key, v, &t.owner)
	return rec, err == nil, err
}

// getLease reads key's lease record, live or not.
func getLease(b *bolt.Bucket, key string) (record, bool, error) {
	v := b.Get([]byte(key))
	if v == nil {
		return record{}, false, nil
	}
	rec, err := decodeRecord(key, v)
	return rec, err == nil, err
}
