package boltstore

import (
	"encoding/binary"

	bolt "go.etcd.io/bbolt"
)

// upgrade makes a file of schema 3 (or older, once its log is replayed)
// one of schema 4, inside Open's recovery commit: every key's high-water
// mark is folded into the floor (the returned top, the highest token the
// file knew), the tokens bucket goes, and every lease record is sealed.
// The meta values are sealed by the commit that calls it, which writes
// each of them.
func upgrade(tx *bolt.Tx, path string) (top uint64, err error) {
	if tokens := tx.Bucket(bucketTokens); tokens != nil {
		if err := tokens.ForEach(func(k, v []byte) error {
			t, err := decodeUint64("token high-water mark in "+path, v)
			top = max(top, t)
			return err
		}); err != nil {
			return 0, err
		}
		if err := tx.DeleteBucket(bucketTokens); err != nil {
			return 0, unavailablef(err, "boltstore: cannot upgrade %s", path)
		}
	}
	leases := tx.Bucket(bucketLeases)
	type kv struct{ k, v []byte }
	var recs []kv
	if err := leases.ForEach(func(k, v []byte) error {
		if _, err := decodePlainRecord(string(k), v, nil); err != nil {
			return err
		}
		top = max(top, beUint64(v))
		recs = append(recs, kv{append([]byte(nil), k...), seal(k, append([]byte(nil), v...))})
		return nil
	}); err != nil {
		return 0, err
	}
	for _, r := range recs {
		if err := leases.Put(r.k, r.v); err != nil {
			return 0, unavailablef(err, "boltstore: cannot upgrade %s", path)
		}
	}
	return top, nil
}

func beUint64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }
