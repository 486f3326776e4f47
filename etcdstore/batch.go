package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Group commit. Every transaction of Acquire, AcquireWait, Renew and
// Release concerns one lease key. While one is in flight, those that other
// goroutines start meanwhile queue up, and the next batch sends all of them
// (on distinct keys) as one Txn of nested transactions:
//
//	Txn().Then(OpTxn(cmps₁, then₁, else₁), OpTxn(cmps₂, then₂, else₂), …)
//
// etcd (≥ 3.3) evaluates every nested transaction's comparisons against the
// state before the Txn and runs the chosen branches in order, in one Raft
// entry. As the keys are distinct, no operation's comparisons or reads can
// see another's writes, so each gets exactly what it would have got alone:
// the batch is the same as running its transactions one after another in
// any order, at one revision. 32 clients then cost etcd a few Raft entries,
// gRPC calls and applies instead of 32 of each.
//
// A lone transaction is sent at once, as a plain Txn, by the goroutine that
// asked: no timer, no hand-off (bbolt's Batch waits 10 ms for company).
//
// Rules:
//   - one batch is in flight per Store (maxInFlight); the next forms from
//     whatever queued meanwhile, in arrival order;
//   - two operations on one lease key never share a batch: all comparisons
//     of a Txn see the state before it, so two acquisitions of one free key
//     in one Txn would both succeed. An operation whose key already has one
//     queued or in flight is sent at once, alone and concurrently, as it
//     would be without batching (the calls overlap, so either order is
//     linearizable); queueing it behind the other would make a contended
//     key hand over one Txn round trip at a time, the holder's Release
//     waiting behind every failed try;
//   - at most one operation per batch raises the high-water mark (etcd
//     refuses a Txn that puts one key twice);
//   - a batch holds at most maxBatch operations (etcd's --max-txn-ops,
//     default 128, counts the nested transactions and, less what they use,
//     their operations; --max-request-bytes, default 1.5 MiB, bounds the
//     request: 64 operations of the longest keys and owners stay under 1 MiB);
//   - a batch etcd refuses before applying anything (too many operations,
//     too large, a duplicate key, an etcd lease gone) is sent again one
//     operation at a time, so that each gets what it would have got alone,
//     and a refusal for size halves maxBatch;
//   - any other error fails every operation of the batch with it: whether
//     the batch took effect is unknown, as for a lone Txn that fails.
//
// Tokens: all writes of one Txn share one revision, so acquisitions
// batched together get the same token (their entries' create revision).
// They are acquisitions of distinct keys, and I1 is per key: the revision
// is still strictly greater than every earlier one, so greater than every
// token issued before for each of those keys.

// maxInFlight is how many batches a Store has in flight at once. One keeps
// the batches largest; measured at 32 clients on one node, 2 and 4 (smaller
// batches that may share a WAL sync) were slower.
const maxInFlight = 1

// maxBatch is the most operations sent in one Txn (see the rules above).
const maxBatch = 64

// txnReq is one operation's transaction, queued for sending.
type txnReq struct {
	key       string // the lease key: operations on one key never share a batch
	hw        bool   // it raises the high-water mark
	cmps      []clientv3.Cmp
	then, els []clientv3.Op
	ctx       context.Context
	done      chan txnResult // buffered: the sender never blocks
	state     reqState       // under batcher.mu
}

type reqState uint8

const (
	reqNew     reqState = iota
	reqQueued           // in the queue
	reqSent             // in a batch or sent alone
	reqDropped          // taken out of the queue unsent, its context having ended
)

type txnResult struct {
	resp *clientv3.TxnResponse
	err  error
}

// batcher queues a Store's transactions and sends them in batches.
type batcher struct {
	cli *clientv3.Client

	mu       sync.Mutex
	queue    []*txnReq      // distinct keys
	inflight int            // batches being sent
	busy     map[string]int // operations queued or being sent, per lease key
	max      int            // operations per batch: maxBatch, halved when etcd refuses a batch's size

	// For tests: set before the Store is used.
	txns       atomic.Int64    // Txn requests sent
	beforeSend func([]*txnReq) // called before a batch is sent
}

func newBatcher(cli *clientv3.Client) *batcher {
	return &batcher{cli: cli, busy: make(map[string]int), max: maxBatch}
}

// errBatch reports a batched Txn that failed.
type errBatch struct {
	n   int
	err error
}

func (e *errBatch) Error() string {
	return fmt.Sprintf("a Txn batching %d operations failed, whether it took effect is unknown: %v", e.n, e.err)
}

func (e *errBatch) Unwrap() error { return e.err }

// txn sends r's transaction, alone or batched with others, and returns its
// response as a lone Txn would have: Succeeded and Responses are r's own,
// Header the Txn's. If ctx ends first it returns ctx's error, wrapped in
// errNotSent if the transaction was still queued (it then had no effect;
// otherwise it may still take effect).
func (s *Store) txn(ctx context.Context, r *txnReq) (*clientv3.TxnResponse, error) {
	b := s.batch
	r.ctx = ctx
	r.done = make(chan txnResult, 1)
	b.mu.Lock()
	if b.busy[r.key] > 0 {
		// Another operation on the key is queued or in flight.
		b.busy[r.key]++
		r.state = reqSent
		b.mu.Unlock()
		b.send([]*txnReq{r})
		b.mu.Lock()
		b.doneLocked(r)
		b.mu.Unlock()
		res := <-r.done
		return res.resp, res.err
	}
	b.busy[r.key]++
	r.state = reqQueued
	b.queue = append(b.queue, r)
	batch := b.formLocked()
	b.mu.Unlock()
	switch {
	case len(batch) == 1 && batch[0] == r:
		// Alone: send it from this goroutine, with its own context.
		b.send(batch)
		b.finish(batch)
	case batch != nil:
		go b.run(batch)
	}
	select {
	case res := <-r.done:
		return res.resp, res.err
	case <-ctx.Done():
	}
	select {
	case res := <-r.done: // it finished as ctx ended
		return res.resp, res.err
	default:
	}
	b.mu.Lock()
	if r.state == reqQueued {
		b.queue = slices.DeleteFunc(b.queue, func(q *txnReq) bool { return q == r })
		b.dropLocked(r)
	}
	unsent := r.state == reqDropped
	b.mu.Unlock()
	if unsent {
		return nil, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
	}
	return nil, ctx.Err()
}

// errNotSent means an operation's context ended while it was queued: it
// was never sent, so it had no effect.
var errNotSent = errors.New("not sent")

// dropLocked forgets r, taken out of the queue unsent because its context
// ended.
func (b *batcher) dropLocked(r *txnReq) {
	r.state = reqDropped
	b.doneLocked(r)
}

// doneLocked counts r's key free of r.
func (b *batcher) doneLocked(r *txnReq) {
	if b.busy[r.key]--; b.busy[r.key] <= 0 {
		delete(b.busy, r.key)
	}
}

// formLocked takes the next batch out of the queue and counts it in
// flight, or returns nil if none may be sent now.
func (b *batcher) formLocked() []*txnReq {
	if b.inflight >= maxInFlight || len(b.queue) == 0 {
		return nil
	}
	var batch []*txnReq
	var hw bool
	rest := b.queue[:0]
	for _, r := range b.queue {
		switch {
		case r.ctx.Err() != nil: // its caller returns errNotSent
			b.dropLocked(r)
			continue
		case len(batch) >= b.max || (r.hw && hw):
			rest = append(rest, r)
			continue
		}
		hw = hw || r.hw
		r.state = reqSent
		batch = append(batch, r)
	}
	clear(b.queue[len(rest):])
	b.queue = rest
	if len(batch) == 0 {
		return nil
	}
	b.inflight++
	return batch
}

// finish marks batch done and starts the next one, if any.
func (b *batcher) finish(batch []*txnReq) {
	b.mu.Lock()
	for _, r := range batch {
		b.doneLocked(r)
	}
	b.inflight--
	next := b.formLocked()
	b.mu.Unlock()
	if next != nil {
		go b.run(next)
	}
}

func (b *batcher) run(batch []*txnReq) {
	b.send(batch)
	b.finish(batch)
}

// send sends batch and delivers each operation's result.
func (b *batcher) send(batch []*txnReq) {
	if b.beforeSend != nil {
		b.beforeSend(batch)
	}
	if len(batch) == 1 {
		b.solo(batch[0])
		return
	}
	ctx, cancel := anyLive(batch)
	ops := make([]clientv3.Op, len(batch))
	for i, r := range batch {
		ops[i] = clientv3.OpTxn(r.cmps, r.then, r.els)
	}
	b.txns.Add(1)
	resp, err := b.cli.Txn(ctx).Then(ops...).Commit()
	cancel()
	if err == nil && len(resp.Responses) != len(batch) {
		err = fmt.Errorf("etcd answered a Txn of %d operations with %d responses", len(batch), len(resp.Responses))
	}
	if err != nil {
		if refused(err) {
			b.refused(batch, err)
			return
		}
		err = &errBatch{n: len(batch), err: err}
		for _, r := range batch {
			r.done <- txnResult{err: err}
		}
		return
	}
	for i, r := range batch {
		sub := resp.Responses[i].GetResponseTxn()
		if sub == nil {
			r.done <- txnResult{err: &errBatch{n: len(batch), err: fmt.Errorf("response %d is not a transaction's", i)}}
			continue
		}
		// A nested response's header is empty; the Txn's is every
		// operation's (one revision).
		sub.Header = resp.Header
		r.done <- txnResult{resp: (*clientv3.TxnResponse)(sub)}
	}
}

// solo sends r as a plain Txn with its own context.
func (b *batcher) solo(r *txnReq) {
	b.txns.Add(1)
	resp, err := b.cli.Txn(r.ctx).If(r.cmps...).Then(r.then...).Else(r.els...).Commit()
	r.done <- txnResult{resp: resp, err: err}
}

// refused reports errors with which etcd refuses a request before applying
// any of it: the batch had no effect and can be sent again.
func refused(err error) bool {
	return errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) ||
		errors.Is(err, rpctypes.ErrDuplicateKey) || errors.Is(err, rpctypes.ErrLeaseNotFound)
}

// refused sends again, one at a time, the operations of a batch etcd
// refused as a whole (err), so that each gets what it would have got
// alone: an etcd lease gone fails only the operation that used it.
func (b *batcher) refused(batch []*txnReq, err error) {
	if errors.Is(err, rpctypes.ErrTooManyOps) || errors.Is(err, rpctypes.ErrRequestTooLarge) {
		b.mu.Lock()
		b.max = max(1, min(b.max, len(batch)/2))
		b.mu.Unlock()
	}
	var wg sync.WaitGroup
	for _, r := range batch {
		if r.ctx.Err() != nil {
			r.done <- txnResult{err: r.ctx.Err()}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.solo(r)
		}()
	}
	wg.Wait()
}

// anyLive returns a context that ends when every operation's context has
// ended: one caller giving up must not cancel the others' Txn.
func anyLive(batch []*txnReq) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	var live atomic.Int64
	live.Store(int64(len(batch)))
	stops := make([]func() bool, len(batch))
	for i, r := range batch {
		stops[i] = context.AfterFunc(r.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}
