package boltstore

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease"
)

// Bucket and key names of schema version 4. A file holds two top-level
// buckets and nothing else:
//
//	meta    "version" → uint64 big-endian schema version
//	        "schema" → sealed uint64: the version again, so that a damaged
//	        one is told from a newer schema's (readVersion; written by
//	        every Open since it was added, without a new schema)
//	        "wal-epoch" → sealed uint64: the log's epoch (see wal.go)
//	        "wal-size" → sealed uint64: the log's size, which only Open
//	        changes (see wal.go)
//	        "token-floor" → sealed uint64, if set: every token issued from
//	        then on is above it
//	        "clock-lead" → sealed uint64: how far the floor has been put
//	        above the host clock (floor.go)
//	        "quiet" → sealed since and until, int64 Unix nanoseconds, if
//	        quiet renewals were answered since the last checkpoint
//	        (quiet.go)
//	        "store-id" → sealed 32 lower-case hex digits: the store's id
//	        (Store.StoreID; written by every Open that finds none, without
//	        a new schema: a build without it ignores it)
//	leases  key → the sealed lease record (see record), live or expired
//
// Every value but the plain version is sealed: its bytes, then the CRC-32C of
// the key and the bytes (seal), so that a flipped bit in a value or in a
// key's name is found (bbolt's data pages carry no checksum). Open reads
// every value once and refuses the store if one fails (ErrCorrupt).
//
// A key's lease record is its high-water mark: the token of its last
// grant. Releasing a key deletes the record and raises the floor to its
// token, and so does sweeping a lease long expired (fold): a key that
// holds nothing takes no room, and its next token, like any new key's, is
// above the floor (I1). The file grows with the leases held, not with the
// keys ever used.
var (
	bucketMeta   = []byte("meta")
	bucketLeases = []byte("leases")
	keyVersion   = []byte("version")
	// keySchema is the schema version again, sealed: every build reads
	// the plain one first, and the sealed copy tells a damaged plain one
	// from a newer schema's (readVersion).
	keySchema = []byte("schema")
	// keyStoreID is the store's random id (Store.StoreID), set once.
	keyStoreID = []byte("store-id")
	// bucketTokens is schema 3's: key → uint64 high-water mark, kept for
	// good. Open folds it into the floor (upgrade.go).
	bucketTokens = []byte("tokens")
)

// schemaVersion is the layout this build reads and writes. Files with a newer
// version are refused rather than misread. Version 2 added the log: a
// build that knows only version 1 would ignore the log, and with it the
// batches since the last checkpoint of a store that crashed, so it must
// refuse such a file. Version 3 writes the log in blocks (walblock.go) and
// may hold a token floor, both of which a build of version 2 would misread
// as an empty log and ignore. Version 4 seals every value and keeps no
// high-water mark but the lease records and the floor, which a build of
// version 3 would misread as keys never used. Version 5 may hold the mark
// of quiet renewals (quiet.go), which a build of version 4 would ignore,
// ending leases a crash interrupted before their holders' deadlines. Files
// of versions 1 to 4 are upgraded on Open, after the log of a version 2 or
// 3 file is replayed in its own format (version 4's log is version 5's).
const schemaVersion = 5

// sealSize is the bytes seal appends.
const sealSize = 4

// seal appends to v, the value of key, the CRC-32C of key and v.
func seal(key, v []byte) []byte {
	crc := crc32.Update(crc32.Checksum(key, walCRC), walCRC, v)
	return binary.BigEndian.AppendUint32(v, crc)
}

// unseal returns the value sealed in b, the stored value of key, and
// whether it is intact.
func unseal(key, b []byte) ([]byte, bool) {
	if len(b) < sealSize {
		return nil, false
	}
	v := b[:len(b)-sealSize]
	crc := crc32.Update(crc32.Checksum(key, walCRC), walCRC, v)
	return v, binary.BigEndian.Uint32(b[len(v):]) == crc
}

// record is a lease as stored: expiry is absolute time on the store's clock
// (Unix nanoseconds), so it means the same thing after a restart.
//
// Encoding: token u64 | expires i64 | ttl i64 | id [16] | owner (rest),
// integers big-endian.
type record struct {
	token   lease.Token
	expires time.Time
	ttl     time.Duration
	id      lease.ID
	owner   string
}

const recordHeader = 8 + 8 + 8 + len(lease.ID{})

// encode returns the record of key, sealed.
func (r record) encode(key []byte) []byte {
	b := make([]byte, recordHeader, recordHeader+len(r.owner)+sealSize)
	binary.BigEndian.PutUint64(b[0:], uint64(r.token))
	binary.BigEndian.PutUint64(b[8:], uint64(r.expires.UnixNano()))
	binary.BigEndian.PutUint64(b[16:], uint64(r.ttl))
	copy(b[24:], r.id[:])
	return seal(key, append(b, r.owner...))
}

// decodeRecord copies what it needs out of b, which bbolt owns only for the
// life of the transaction.
func decodeRecord(key string, b []byte) (record, error) {
	return decodeRecordOwner(key, []byte(key), b, nil)
}

// decodeRecordOwner is decodeRecord with key's bytes kb, reusing *last
// (when last is not nil) for an owner of the same bytes, and keeping the
// owner there for the next: leases renewed together mostly share one
// owner.
func decodeRecordOwner(key string, kb, b []byte, last *string) (record, error) {
	b, ok := unseal(kb, b)
	if !ok {
		return record{}, unavailablef(nil, "boltstore: the lease record of key %q fails its checksum: the file is damaged (restart to have it checked)", key)
	}
	return decodePlainRecord(key, b, last)
}

// decodePlainRecord decodes an unsealed record (schema 3's, or one
// unsealed).
func decodePlainRecord(key string, b []byte, last *string) (record, error) {
	if len(b) < recordHeader {
		return record{}, unavailablef(nil, "boltstore: corrupt lease record for key %q: %d bytes, want at least %d", key, len(b), recordHeader)
	}
	var r record
	r.token = lease.Token(binary.BigEndian.Uint64(b[0:]))
	r.expires = time.Unix(0, int64(binary.BigEndian.Uint64(b[8:])))
	r.ttl = time.Duration(binary.BigEndian.Uint64(b[16:]))
	copy(r.id[:], b[24:recordHeader])
	switch owner := b[recordHeader:]; {
	case last == nil:
		r.owner = string(owner)
	case string(owner) == *last:
		r.owner = *last
	default:
		r.owner = string(owner)
		*last = r.owner
	}
	if r.token == 0 || r.token > lease.MaxToken || r.id.IsZero() {
		return record{}, unavailablef(nil, "boltstore: corrupt lease record for key %q: token %d, id %v", key, r.token, r.id)
	}
	return r, nil
}

// live reports whether the lease is unexpired at now.
func (r record) live(now time.Time) bool { return now.Before(r.expires) }

func (r record) lease(key string) lease.Lease {
	return lease.Lease{Key: key, Owner: r.owner, Token: r.token, ID: r.id, TTL: r.ttl, Expires: r.expires}
}

func (r record) heldError(key string) error {
	return &lease.HeldError{Key: key, Owner: r.owner, Token: r.token, Expires: r.expires}
}

// putVersion writes the schema version v, plain and sealed.
func putVersion(meta *bolt.Bucket, v uint64) error {
	if err := meta.Put(keyVersion, encodeUint64(v)); err != nil {
		return err
	}
	return meta.Put(keySchema, seal(keySchema, encodeUint64(v)))
}

// readVersion reads the schema version of the file at path. A file
// written before the sealed copy (or whose copy's name was damaged: it is
// written again) has only the plain one; where the copy is there, the two
// must agree, and a version that does not is damage, refused as damage
// AcceptLogLoss moves aside, not a newer schema's.
func readVersion(meta *bolt.Bucket, path string) (uint64, error) {
	plain, sealed := meta.Get(keyVersion), meta.Get(keySchema)
	if len(plain) != 8 {
		return 0, dbDamaged(path, "holds a schema version of %d bytes", len(plain))
	}
	if sealed == nil {
		return beUint64(plain), nil
	}
	v, ok := unseal(keySchema, sealed)
	switch {
	case !ok || len(v) != 8:
		return 0, dbDamaged(path, "holds a schema version that fails its checksum")
	case beUint64(plain) != beUint64(v):
		return 0, dbDamaged(path, "holds a schema version, %d, that is not its sealed copy's, %d", beUint64(plain), beUint64(v))
	}
	return beUint64(v), nil
}

func encodeUint64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func decodeUint64(what string, b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, unavailablef(nil, "boltstore: corrupt %s: %d bytes, want 8", what, len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}

// storeError is an error with a message of its own that matches every error
// in errs (lease.ErrUnavailable first, then the cause), so that callers can
// test for the sentinel and still see bbolt's error.
type storeError struct {
	msg  string
	errs []error
}

func (e *storeError) Error() string   { return e.msg }
func (e *storeError) Unwrap() []error { return e.errs }

// unavailablef returns an error matching lease.ErrUnavailable and cause (if
// not nil). When cause is not nil its text is appended after ": ".
func unavailablef(cause error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	errs := []error{lease.ErrUnavailable}
	if cause != nil {
		msg += ": " + cause.Error()
		errs = append(errs, cause)
	}
	return &storeError{msg: msg, errs: errs}
}

// unsealStoreID returns the store id sealed in b, the stored value of
// keyStoreID, and whether it is intact: 32 lower-case hex digits.
func unsealStoreID(b []byte) (string, bool) {
	v, ok := unseal(keyStoreID, b)
	if !ok || len(v) != 32 {
		return "", false
	}
	for _, c := range v {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return string(v), true
}
