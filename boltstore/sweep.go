package boltstore

import "time"

// Sweeping. A released key's record is deleted at once and its token
// folded into the floor (fold); an expired lease's record stays, as the
// key's high-water mark and for Get to find expired, until the key is
// next written. So that a key that is never written again does not keep
// its record for good, the commit loop sweeps: before each checkpoint,
// and once a checkpoint interval when there is nothing to checkpoint
// (then checkpointing if the pass deleted anything), it reads on from
// where the last pass stopped, up to sweepBatch records, and deletes
// those whose lease expired sweepGrace or more ago and whose key no waiter
// queues for, raising the floor to their tokens, in the checkpoint's own
// commit (the log does not carry it: the commit makes it durable, and a
// crash before it leaves the records, which is what they were). An idle
// store comes round its file in about records / (idleSweeps × sweepBatch)
// intervals, and the file then holds the leases held, and those expired
// within sweepGrace. (bbolt reuses the pages freed, and never gives them
// back: the file stays at the most it ever held.)
const (
	sweepBatch = 4096
	sweepGrace = time.Minute // well past the watch's expiry report (DESIGN.md)
)

// sweep runs one pass in t, the open transaction, and returns how many
// records it deleted. The caller holds txMu.
func (s *Store) sweep(t *txn) (int, error) {
	if s.noLog {
		return 0, nil // the benchmark variant commits every batch: no checkpoint to ride
	}
	now := s.now()
	c := t.leases.Cursor()
	k, v := c.First()
	if s.sweepAfter != nil {
		if k, v = c.Seek(s.sweepAfter); k != nil && string(k) == string(s.sweepAfter) {
			k, v = c.Next()
		}
	}
	type dead struct {
		key string
		rec record
	}
	var due []dead
	for read := 0; k != nil && read < sweepBatch; k, v = c.Next() {
		read++
		rec, err := decodeRecord(string(k), v)
		if err != nil {
			return 0, err
		}
		if !now.Before(rec.expires.Add(sweepGrace)) {
			due = append(due, dead{string(k), rec})
		}
	}
	if k == nil {
		s.sweepAfter = nil
	} else {
		s.sweepAfter = append(s.sweepAfter[:0], k...)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	floor, n := s.floor, 0
	for _, d := range due {
		if len(s.queueOf(d.key)) > 0 {
			continue // its waiters' timer hands it over
		}
		s.noteExpired(d.key, d.rec)
		if err := t.leases.Delete([]byte(d.key)); err != nil {
			return n, unavailablef(err, "boltstore: sweeping %q", d.key)
		}
		floor = max(floor, uint64(d.rec.token))
		n++
	}
	if floor > s.floor {
		if err := putMeta(t.meta, keyTokenFloor, floor); err != nil {
			return n, err
		}
		s.floor = floor
	}
	return n, nil
}

// idleSweeps is how many passes an idle tick makes while each finds
// records to delete: a store left with many expired leases is cleared at
// up to idleSweeps × sweepBatch records an interval.
const idleSweeps = 16

// idleSweep sweeps when there is nothing to checkpoint, and checkpoints
// if a pass deleted anything.
func (s *Store) idleSweep() {
	if s.failure() != nil {
		return
	}
	total := 0
	for range idleSweeps {
		s.txMu.Lock()
		n, err := s.sweep(s.live)
		s.txMu.Unlock()
		if err != nil {
			s.fail(err)
			return
		}
		if total += n; n == 0 || s.sweepAfter == nil {
			break
		}
	}
	if total > 0 {
		s.checkpoint()
	}
}
