package boltstore

import (
	"errors"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
)

// recoverLog replays the log of the store's last run into the bbolt file
// (a run that ended in a crash left the batches since its last checkpoint
// there, and only there) and commits that as a checkpoint of its own,
// raising the epoch, so that the log starts over. It returns the log,
// ready for records, the token floor, and whether it created the log.
//
// A damaged log (see walblock.go) is refused with a *CorruptError, unless
// accept is not nil: then the records from the damage on are dropped and
// the floor is raised above every token they may have issued, in the same
// commit, and accept hears of it.
func recoverLog(db *bolt.DB, path string, version uint64, accept func(*CorruptError)) (w *wal, floor uint64, created bool, err error) {
	var epoch uint64
	if err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var err error
		if v := meta.Get(keyWALEpoch); v != nil {
			if epoch, err = decodeUint64("log epoch in "+path, v); err != nil {
				return err
			}
		}
		if v := meta.Get(keyTokenFloor); v != nil {
			floor, err = decodeUint64("token floor in "+path, v)
		}
		return err
	}); err != nil {
		return nil, 0, false, err
	}
	w, data, created, err := openWAL(path, epoch)
	if err != nil {
		return nil, 0, created, err
	}
	opened := w // w is nil once a failure is returned
	defer func() {
		if err != nil {
			_ = opened.close()
		}
	}()
	var (
		entries []walEntry
		end     int
		dmg     *logDamage
	)
	switch {
	case epoch == 0:
		// A new file, or one of schema 1: it never had a log, so what is
		// there is another store's.
	case version == 2:
		if entries, end, err = replayV2(data, epoch); err != nil {
			return nil, 0, created, unavailablef(err, "boltstore: the log %s is corrupt", w.path)
		}
	default:
		entries, end, dmg = replay(data, epoch)
	}
	var loss *CorruptError
	if dmg != nil {
		loss = &CorruptError{Log: w.path, Offset: dmg.at, Reason: dmg.reason, Lost: lostTokens(int64(len(data)) - dmg.from)}
		if accept == nil {
			return nil, 0, created, loss
		}
	} else if err := w.zero(int64(end), w.size); err != nil {
		// Past the records of epoch there may be records of any epoch: of
		// earlier checkpoints, or of another bbolt file's life if this one
		// is new or was replaced, whose epochs start over. Once the epoch
		// is raised, some could be taken for its own; zeros can't. Done
		// before that: a crash in between leaves the records of epoch,
		// which the next Open replays again. (A damaged log keeps all it
		// holds until the floor that stands for its loss is committed.)
		return nil, 0, created, err
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := applyEntries(tx, entries); err != nil {
			return unavailablef(err, "boltstore: replaying the log %s into %s", w.path, path)
		}
		meta := tx.Bucket(bucketMeta)
		if loss != nil {
			top, err := highestToken(tx, path)
			if err != nil {
				return err
			}
			next := max(top, floor) + loss.Lost
			if next < top || next >= uint64(lease.MaxToken) {
				return unavailablef(nil, "boltstore: cannot accept the loss of the log %s: the tokens it may have issued reach past the largest token, %d", w.path, lease.MaxToken)
			}
			floor = next
			loss.Floor = lease.Token(floor)
			if err := meta.Put(keyTokenFloor, encodeUint64(floor)); err != nil {
				return err
			}
		}
		return meta.Put(keyWALEpoch, encodeUint64(epoch+1))
	}); err != nil {
		var own *storeError
		if errors.As(err, &own) {
			return nil, 0, created, err
		}
		return nil, 0, created, unavailablef(err, "boltstore: recovering %s from its log", path)
	}
	// The file has everything the log held, and a new epoch: the log's
	// records are of no use now. Zeroed, damage and all, the next run's
	// records go into zeros, and the log of a file of schema 2 leaves
	// nothing of its format behind.
	zeroTo := int64(end)
	if loss != nil {
		zeroTo = w.size
	}
	if err := w.zero(0, zeroTo); err != nil {
		return nil, 0, created, err
	}
	if version < schemaVersion {
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketMeta).Put(keyVersion, encodeUint64(schemaVersion))
		}); err != nil {
			return nil, 0, created, unavailablef(err, "boltstore: cannot upgrade %s to schema version %d", path, schemaVersion)
		}
	}
	if err := w.prepare(); err != nil {
		return nil, 0, created, err
	}
	w.restart(epoch + 1)
	if loss != nil {
		accept(loss)
	}
	return w, floor, created, nil
}

// highestToken returns the highest token the file has issued for any key.
func highestToken(tx *bolt.Tx, path string) (uint64, error) {
	var top uint64
	err := tx.Bucket(bucketTokens).ForEach(func(k, v []byte) error {
		t, err := decodeUint64("token high-water mark in "+path, v)
		top = max(top, t)
		return err
	})
	return top, err
}
