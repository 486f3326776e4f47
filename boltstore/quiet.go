package boltstore

import (
	"encoding/binary"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Quiet renewals.
//
// A renewal changes no token and grants nothing: all a crash can undo is
// the later expiry it promised. So a renewal that does not lengthen its
// lease's TTL is quiet: it is applied to the open write transaction, like
// every write, and answered with the batch, but not recorded in the log,
// and a batch of nothing else costs no fdatasync. A checkpoint writes it
// to the bbolt file with the rest of the transaction. What a crash loses
// of it is made good at the next Open instead, as etcd does for its own
// lease keep-alives (which it never writes to its log), with a promise
// kept on disk:
//
//   - Before a quiet renewal is answered, the log holds, durably, the
//     mark (meta "quiet", sealed: since and until, Unix nanoseconds on the
//     store's clock): no quiet renewal is answered after until. A quiet
//     renewal at now past until writes a new mark, until = now +
//     quietWindow, in its batch's log record, whose fdatasync comes before
//     any answer of the batch; since is the time of the first mark after
//     the last checkpoint, before any quiet renewal not yet in the file.
//   - A checkpoint commits every quiet renewal so far to the file, and
//     deletes the mark in the same commit: nothing quiet is left to lose.
//     So a store closed cleanly leaves no mark.
//   - Open, finding a mark (the store stopped without its last
//     checkpoint), keeps every lease that may have been renewed quietly
//     until at least until + its TTL (graceQuiet): no answer promised more
//     than that, as a quiet renewal's TTL is never above the one its
//     record keeps (a lengthening renewal is logged; a quiet one may only
//     shorten it, and the record keeps the longer until a checkpoint). A
//     lease whose record expired by since is left as it is: to be renewed
//     quietly it had to be live when renewed, after since, and its
//     durable expiry was then its expiry.
//
// A lease kept on after a crash is one whose holder may still hold it.
// The file cannot tell which leases were renewed quietly, so every lease
// live at since is kept: one whose holder died with the store, or stopped
// renewing, is held up to quietWindow plus its TTL past the crash, longer
// than its holder was last told, and one that expired between since and
// the crash is held again until then, before it can be acquired again.
// Lengthening renewals, and every grant, release and fold, are logged and
// fsynced before their answers, as before (I1). A log whose loss is
// accepted (AcceptLogLoss) may have lost the mark with the rest: the
// leases it covered then end at the expiries the file has, as a lost
// acquisition's lease does.
var keyQuiet = []byte("quiet")

// quietWindow is how long a mark covers quiet renewals: with renewals
// arriving all the time, it costs one logged write and fdatasync a
// quietWindow (or one after each checkpoint).
const quietWindow = time.Second

// quietMark is the mark's value.
type quietMark struct {
	since, until time.Time
}

func (m quietMark) encode() []byte {
	b := binary.BigEndian.AppendUint64(nil, uint64(m.since.UnixNano()))
	return binary.BigEndian.AppendUint64(b, uint64(m.until.UnixNano()))
}

// decodeQuietMark reads the mark's plain value (unsealed).
func decodeQuietMark(b []byte) (quietMark, bool) {
	if len(b) != 16 {
		return quietMark{}, false
	}
	return quietMark{
		since: time.Unix(0, int64(binary.BigEndian.Uint64(b))),
		until: time.Unix(0, int64(binary.BigEndian.Uint64(b[8:]))),
	}, true
}

// putQuiet writes rec, renewed quietly at now, into t without a log
// entry, after writing (and logging) a new mark if now is past the
// current one's until.
func (s *Store) putQuiet(t *txn, key string, rec record, now time.Time) error {
	if s.quiet.until.IsZero() || now.After(s.quiet.until) {
		m := quietMark{since: s.quiet.since, until: now.Add(quietWindow)}
		if m.since.IsZero() {
			m.since = now
		}
		if err := t.put(t.meta, keyQuiet, seal(keyQuiet, m.encode())); err != nil {
			return unavailablef(err, "boltstore: write the quiet renewals' mark")
		}
		s.quiet = m
	}
	if err := t.leases.Put(t.leaseRecord(key, rec)); err != nil { // not logged
		return unavailablef(err, "boltstore: store lease %q", key)
	}
	return nil
}

// clearQuiet deletes the mark in t, a checkpoint's transaction: its commit
// makes every quiet renewal so far durable. The log starts over after it,
// so the delete is not logged; a failed commit leaves the mark in the log.
func (s *Store) clearQuiet(t *txn) error {
	if s.quiet.until.IsZero() {
		return nil
	}
	if err := t.meta.Delete(keyQuiet); err != nil {
		return err
	}
	s.quiet = quietMark{}
	return nil
}

// graceQuiet, in Open's recovery transaction (the log replayed), keeps
// the leases that may have been renewed quietly before the store stopped
// until at least the mark's until plus their TTL, and deletes the mark.
// A mark that fails its checksum (its loss accepted) is read as since the
// beginning until now: every lease is kept a TTL from now.
func graceQuiet(tx *bolt.Tx, now time.Time) error {
	meta := tx.Bucket(bucketMeta)
	b := meta.Get(keyQuiet)
	if b == nil {
		return nil
	}
	m, ok := quietMark{}, false
	if v, intact := unseal(keyQuiet, b); intact {
		m, ok = decodeQuietMark(v)
	}
	if !ok {
		m = quietMark{since: time.Unix(0, 0), until: now}
	}
	leases := tx.Bucket(bucketLeases)
	type kv struct{ k, v []byte }
	var kept []kv
	c := leases.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		rec, err := decodeRecord(string(k), v)
		if err != nil {
			continue // dropped as damaged, or refused, by readMeta's check
		}
		if !rec.expires.After(m.since) {
			continue
		}
		if at := m.until.Add(rec.ttl); rec.expires.Before(at) {
			rec.expires = at
			key := append([]byte(nil), k...)
			kept = append(kept, kv{key, rec.encode(key)})
		}
	}
	for _, r := range kept {
		if err := leases.Put(r.k, r.v); err != nil {
			return unavailablef(err, "boltstore: keep the leases renewed before the stop")
		}
	}
	return meta.Delete(keyQuiet)
}
