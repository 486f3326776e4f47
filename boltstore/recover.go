package boltstore

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
)

// What Open checks, and what it does with each finding, is in doc.go
// ("The files vouch for each other"). recoverLog is where it happens.

// metaState is what the bbolt file says about itself.
type metaState struct {
	epoch   uint64 // the log's epoch; 0: the file never had a log
	floor   uint64
	walSize int64  // the log's size when the file was last opened; 0: not recorded (schema 3 and older)
	top     uint64 // the highest token the file knows: its floor, or a lease's
	lead    uint64 // how far the floor has been put ahead of the host clock (floor.go)
}

// recovery is what Open hands recoverLog.
type recovery struct {
	path    string
	version uint64
	fresh   bool          // the bbolt file is new: no floor from the clock, tokens start at 1
	lost    *CorruptError // a loss already accepted (the bbolt file was missing, empty or damaged)
	// leadCopy is the lead in the copy beside the file (lead.go), 0 if
	// none: the lead is at least it.
	leadCopy uint64
	accept   func(*CorruptError)
	now      func() time.Time // the host clock, for the floor
	// expiryNow is the store's clock, which judges expiry (WithClock), for
	// a damaged quiet mark (graceQuiet).
	expiryNow    func() time.Time
	noQuietGrace bool // tests only: the mark is deleted unread
	// afterCommit, tests only, runs after each commit of the recovery: an
	// error stops Open there, as a kill would.
	afterCommit func() error
}

// readMeta reads the file's meta values, and checks every sealed value in
// it: a value that fails its checksum is a *CorruptError, returned with
// what could be read.
func readMeta(tx *bolt.Tx, path string, version uint64) (metaState, *CorruptError, error) {
	var (
		st  metaState
		bad *CorruptError
	)
	damaged := func(format string, args ...any) {
		if bad == nil {
			bad = &CorruptError{File: path, Log: walPath(path), Offset: -1, Reason: fmt.Sprintf(format, args...)}
		}
	}
	meta := tx.Bucket(bucketMeta)
	get := func(key []byte) (uint64, bool, error) {
		b := meta.Get(key)
		if b == nil {
			return 0, false, nil
		}
		if version >= 4 {
			v, ok := unseal(key, b)
			if !ok || len(v) != 8 {
				damaged("holds a %s that fails its checksum", key)
				return 0, false, nil
			}
			b = v
		}
		v, err := decodeUint64(string(key)+" in "+path, b)
		return v, err == nil, err
	}
	var err error
	if st.epoch, _, err = get(keyWALEpoch); err != nil {
		return st, nil, err
	}
	if st.floor, _, err = get(keyTokenFloor); err != nil {
		return st, nil, err
	}
	if st.lead, _, err = get(keyClockLead); err != nil {
		return st, nil, err
	}
	size, _, err := get(keyWALSize)
	if err != nil {
		return st, nil, err
	}
	st.walSize = int64(size)
	st.top = st.floor
	if b := meta.Get(keyStoreID); b != nil {
		if _, ok := unsealStoreID(b); !ok {
			damaged("holds a %s that fails its checksum", keyStoreID)
		}
	}
	if version < 4 {
		return st, bad, nil // nothing sealed to check; upgrade folds the rest
	}
	if b := meta.Get(keyQuiet); b != nil {
		if v, ok := unseal(keyQuiet, b); !ok || len(v) != 16 {
			damaged("holds a %s mark that fails its checksum", keyQuiet)
		}
	}
	// Every lease record, once: a flipped bit anywhere in one, its key
	// included, is found now rather than trusted later.
	c := tx.Bucket(bucketLeases).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		plain, ok := unseal(k, v)
		if !ok || len(plain) < recordHeader {
			damaged("holds a lease record, for key %q, that fails its checksum", k)
			continue
		}
		rec, err := decodePlainRecord(string(k), plain, nil)
		if err != nil {
			damaged("holds a lease record, for key %q, that does not decode", k)
			continue
		}
		st.top = max(st.top, uint64(rec.token))
	}
	return st, bad, nil
}

// recoverLog checks that the bbolt file and its log belong together,
// replays the log of the store's last run into the file (a run that ended
// in a crash left the batches since its last checkpoint there, and only
// there), upgrades an older schema, raises the floor, and commits all that
// as a checkpoint of its own, raising the epoch, so that the log starts
// over. It returns the log, ready for records, the token floor, and
// whether it created the log.
//
// Damage, or files that do not vouch for each other, are refused with a
// *CorruptError, unless r.accept is not nil: then what cannot be trusted
// is dropped and the floor is raised above every token it may have
// issued, in the same commit, and accept hears of it.
func recoverLog(db *bolt.DB, r recovery) (w *wal, floor, lead uint64, created bool, err error) {
	var (
		st   metaState
		loss = r.lost
	)
	if err := db.View(func(tx *bolt.Tx) error {
		var bad *CorruptError
		var err error
		st, bad, err = readMeta(tx, r.path, r.version)
		if loss == nil {
			loss = bad
		}
		return err
	}); err != nil {
		return nil, 0, 0, false, err
	}
	if loss != nil && r.accept == nil {
		return nil, 0, 0, false, loss
	}
	logLost := loss != nil && loss.File == r.path && loss.Reason == reasonMetaEpoch
	w, data, created, err := openWAL(r.path, st.epoch, loss != nil || r.accept != nil)
	if err != nil {
		return nil, 0, 0, created, err
	}
	opened := w // w is nil once a failure is returned
	defer func() {
		if err != nil {
			_ = opened.close()
		}
	}()
	lostFrom := int64(-1) // where the log's records that may be lost begin; -1: none lost
	refuse := func(c *CorruptError) error {
		if loss == nil {
			loss = c
		}
		if r.accept == nil {
			return loss
		}
		return nil
	}
	if created && st.epoch > 0 {
		// openWAL lets this through only to accept it.
		if err := refuse(&CorruptError{File: w.path, Log: w.path, Offset: -1, Reason: fmt.Sprintf("is missing, but %s has had a log, which may hold writes made after its last checkpoint (if it was moved, move it back)", r.path)}); err != nil {
			return nil, 0, 0, created, err
		}
		lostFrom = 0
	}
	if st.walSize > 0 && int64(len(data)) != st.walSize && !created {
		if err := refuse(&CorruptError{File: w.path, Log: w.path, Offset: -1, Reason: fmt.Sprintf("is %d bytes, but %s recorded %d: it was cut short, grown or replaced since", len(data), r.path, st.walSize)}); err != nil {
			return nil, 0, 0, created, err
		}
		lostFrom = 0
	}
	var (
		entries []walEntry
		end     int
	)
	switch {
	case st.epoch == 0 || lostFrom == 0 || logLost || r.lost != nil:
		// A new file, or one of schema 1: it never had a log, so what is
		// there is another store's. Or a log that cannot be read as the
		// file's.
	case r.version == 2:
		if entries, end, err = replayV2(data, st.epoch); err != nil {
			return nil, 0, 0, created, unavailablef(err, "boltstore: the log %s is corrupt", w.path)
		}
		if end > 0 {
			if err := settleV2(db, w, entries, st.epoch, r.afterCommit); err != nil {
				return nil, 0, 0, created, err
			}
			st.epoch++
			entries, end = nil, 0
		}
	default:
		var dmg *logDamage
		entries, end, dmg = replay(data, st.epoch)
		if dmg != nil {
			c := &CorruptError{File: w.path, Log: w.path, Offset: dmg.at, Reason: dmg.reason}
			if dmg.newer {
				c = &CorruptError{File: r.path, Log: w.path, Offset: -1, Reason: dmg.reason}
			}
			if err := refuse(c); err != nil {
				return nil, 0, 0, created, err
			}
			lostFrom = dmg.from
		}
	}
	if loss != nil {
		if lostFrom < 0 {
			lostFrom = 0 // lease.db's damage: whatever the log held may be of it
		}
		loss.Lost = lostTokens(max(int64(len(data)), st.walSize) - lostFrom)
	}
	if loss == nil {
		// Past the records of epoch there may be records of earlier
		// checkpoints. Once the epoch is raised, some could be taken for
		// its own; zeros can't. Done before that: a crash in between
		// leaves the records of epoch, which the next Open replays again.
		// (A damaged log keeps all it holds until the floor that stands
		// for its loss is committed.)
		if err := w.zero(int64(end), w.size); err != nil {
			return nil, 0, 0, created, err
		}
	}
	// The log keeps one size from now on (see wal.go), recorded below.
	if err := w.reserve(); err != nil {
		return nil, 0, 0, created, err
	}
	epoch := st.epoch
	if logLost {
		epoch = maxEpoch(data) // the file's own is unreadable; above any in the log
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		top := st.top
		if err := applyEntries(tx, entries, r.version); err != nil {
			return unavailablef(err, "boltstore: replaying the log %s into %s", w.path, r.path)
		}
		for _, e := range entries {
			switch {
			case e.bucket == 'l' && e.op == 'p' && len(e.value) >= 8:
				top = max(top, beUint64(e.value)) // a grant's token
			case e.bucket == 'm' && e.op == 'p' && string(e.key) == string(keyTokenFloor):
				// A release's fold. Its token was granted, so a lease put
				// above or the file holds it too; read all the same.
				if v, ok := unseal(e.key, e.value); ok && len(v) == 8 {
					top = max(top, beUint64(v))
				}
			}
		}
		if r.version < 4 {
			t, err := upgrade(tx, r.path)
			if err != nil {
				return err
			}
			top = max(top, t)
		}
		floor = max(st.floor, top)
		if loss != nil {
			if err := dropDamaged(tx); err != nil {
				return err
			}
		}
		if r.noQuietGrace {
			if err := tx.Bucket(bucketMeta).Delete(keyQuiet); err != nil {
				return err
			}
		} else if err := graceQuiet(tx, r.expiryNow()); err != nil {
			return err
		}
		lead = max(st.lead, r.leadCopy)
		if r.lost != nil { // a new file, in place of the one moved aside
			floor = max(floor, r.lost.salvaged.floor)
			lead = max(lead, r.lost.salvaged.lead)
		}
		clock := !r.fresh || loss != nil
		now := clockFloor(r.now())
		if clock {
			// The host clock's floor: see floor.go.
			floor = max(floor, now+lead)
		}
		if loss != nil {
			next := floor + loss.Lost
			if next < floor || next >= uint64(lease.MaxToken) {
				return unavailablef(nil, "boltstore: cannot accept the loss of %s: the tokens it may have issued reach past the largest token, %d", loss.File, lease.MaxToken)
			}
			floor = next
			loss.Floor = lease.Token(floor)
		}
		if floor >= uint64(lease.MaxToken) {
			return unavailablef(nil, "boltstore: %s: tokens are exhausted at %d", r.path, floor)
		}
		if clock && floor > now {
			lead = max(lead, floor-now)
		}
		meta := tx.Bucket(bucketMeta)
		if err := putMeta(meta, keyClockLead, lead); err != nil {
			return err
		}
		if err := putMeta(meta, keyTokenFloor, floor); err != nil {
			return err
		}
		if err := putMeta(meta, keyWALSize, uint64(w.size)); err != nil {
			return err
		}
		if err := putMeta(meta, keyWALEpoch, epoch+1); err != nil {
			return err
		}
		if err := keepStoreID(meta); err != nil {
			return err
		}
		return putVersion(meta, schemaVersion)
	}); err != nil {
		var own *storeError
		if errors.As(err, &own) {
			return nil, 0, 0, created, err
		}
		return nil, 0, 0, created, unavailablef(err, "boltstore: recovering %s from its log", r.path)
	}
	if r.afterCommit != nil {
		if err := r.afterCommit(); err != nil {
			return nil, 0, 0, created, err
		}
	}
	// The file has everything the log held, and a new epoch: the log's
	// records are of no use now. Zeroed, damage and all, the next run's
	// records go into zeros, and the log of an older schema leaves
	// nothing of its format behind.
	zeroTo := int64(end)
	if loss != nil || r.version < schemaVersion {
		zeroTo = w.size
	}
	if err := w.zero(0, zeroTo); err != nil {
		return nil, 0, 0, created, err
	}
	if err := w.prepare(); err != nil {
		return nil, 0, 0, created, err
	}
	w.restart(epoch + 1)
	if loss != nil {
		r.accept(loss)
	}
	return w, floor, lead, created, nil
}

// settleV2 commits the records replayed from a log of schema version 2
// to the file, still of that version, in a commit that raises its epoch,
// and then zeroes the log: the upgrade's commit comes after, on a log of
// zeros. In one commit with the upgrade, a crash between it and the
// zeroing left a file of this schema beside records of version 2's
// format, which Open then refused as a damaged log; a crash after this
// commit leaves a file of version 2 whose log's records are of an
// earlier epoch, which version 2's replay skips.
func settleV2(db *bolt.DB, w *wal, entries []walEntry, epoch uint64, afterCommit func() error) error {
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := applyEntries(tx, entries, 2); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keyWALEpoch, encodeUint64(epoch+1))
	}); err != nil {
		return unavailablef(err, "boltstore: replaying the log %s of schema version 2", w.path)
	}
	if afterCommit != nil {
		if err := afterCommit(); err != nil {
			return err
		}
	}
	return w.zero(0, w.size)
}

// salvaged is what salvage finds of a damaged bbolt file's floor and lead.
type salvaged struct{ floor, lead uint64 }

// salvage reads the token floor and the clock lead (floor.go) out of the
// bytes of the bbolt file at path, which bbolt cannot open and
// AcceptLogLoss moves aside, for the new file: the clock alone is not
// above the tokens of a store whose floor a restore's bump put ahead of
// it. bbolt keeps each value right after its key, and the seal
// (record.go) tells one intact from chance; of several copies (freed
// pages keep older ones) the highest counts, as both only rise. What
// cannot be found reads as 0.
func salvage(path string) salvaged {
	b, err := os.ReadFile(path)
	if err != nil {
		return salvaged{}
	}
	highest := func(key []byte) (top uint64) {
		for off := 0; ; {
			i := bytes.Index(b[off:], key)
			if i < 0 {
				return top
			}
			off += i + len(key)
			// Below lease.MaxToken, as every floor and lead is: a
			// key or owner (valid UTF-8, no control characters) cannot
			// hold a sealed value that passes for one.
			if v, ok := unseal(key, b[off:min(off+8+sealSize, len(b))]); ok && len(v) == 8 && beUint64(v) < uint64(lease.MaxToken) {
				top = max(top, beUint64(v))
			}
		}
	}
	return salvaged{floor: highest(keyTokenFloor), lead: highest(keyClockLead)}
}

// keepStoreID keeps the store id in meta, and writes a new random one
// where it is missing (a store made before ids were kept, or a new file in
// place of one moved aside) or damaged (which only an Open accepting the
// loss gets past readMeta). A new id makes every client that saw the old
// one refuse this store's answers (leasehttp StoreHeader) until restarted:
// the safe side, where the store may have lost what it held. An id is
// never read back out of a damaged file's raw bytes, as the floor and the
// lead are (salvage): those bytes hold the owners and keys clients wrote,
// and a forged id taken from them could be another store's, which clients
// would then take this one for; a forged floor or lead can only raise
// tokens.
func keepStoreID(meta *bolt.Bucket) error {
	if _, ok := unsealStoreID(meta.Get(keyStoreID)); ok {
		return nil
	}
	return meta.Put(keyStoreID, seal(keyStoreID, []byte(lease.NewID().Reveal())))
}

// readStoreID returns the store id of the file db, which Open has made
// sure of (keepStoreID).
func readStoreID(db *bolt.DB, path string) (id string, err error) {
	err = db.View(func(tx *bolt.Tx) error {
		var ok bool
		if id, ok = unsealStoreID(tx.Bucket(bucketMeta).Get(keyStoreID)); !ok {
			return unavailablef(nil, "boltstore: %s holds no intact store id after Open wrote one", path)
		}
		return nil
	})
	return id, err
}

// reasonMetaEpoch is readMeta's reason for a log epoch that fails its
// checksum: the log cannot be told from another's, and is dropped.
const reasonMetaEpoch = "holds a wal-epoch that fails its checksum"

// dropDamaged rebuilds the leases bucket of the records that pass their
// checksum: the others' leases are forgotten, and their tokens are below
// the floor the loss raises. Rebuilt, not deleted from: a flipped bit in
// a key's name can leave two records under one name, or one out of
// order, which bbolt's Delete would take for the other.
func dropDamaged(tx *bolt.Tx) error {
	type kv struct{ k, v []byte }
	var good []kv
	c := tx.Bucket(bucketLeases).Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if plain, ok := unseal(k, v); ok && len(plain) >= recordHeader {
			good = append(good, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
		}
	}
	if err := tx.DeleteBucket(bucketLeases); err != nil {
		return err
	}
	b, err := tx.CreateBucket(bucketLeases)
	if err != nil {
		return err
	}
	for _, r := range good {
		if err := b.Put(r.k, r.v); err != nil {
			return err
		}
	}
	return nil
}

// putMeta puts the sealed v at key in meta.
func putMeta(meta *bolt.Bucket, key []byte, v uint64) error {
	return meta.Put(key, seal(key, encodeUint64(v)))
}
