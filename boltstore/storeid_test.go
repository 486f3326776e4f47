package boltstore_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/leasehq/lease/boltstore"
)

var boltStoreID = regexp.MustCompile(`^bolt:[0-9a-f]{32}$`)

// storeIDAt opens the store at path, returns its StoreID and closes it.
func storeIDAt(t *testing.T, path string, opts ...boltstore.Option) string {
	t.Helper()
	s, err := boltstore.Open(path, opts...)
	must(t, err)
	id := s.StoreID()
	must(t, s.Close())
	if !boltStoreID.MatchString(id) {
		t.Fatalf("StoreID of %s = %q, want bolt: and 32 hex digits", path, id)
	}
	return id
}

// TestStoreIDKept: a store's id is created with it and read by every later
// Open, kept by Backup and Restore (the restored store is the same store to
// clients that saw it), and another store has another.
func TestStoreIDKept(t *testing.T) {
	t.Parallel()
	path, other := filepath.Join(t.TempDir(), "lease.db"), filepath.Join(t.TempDir(), "lease.db")
	id := storeIDAt(t, path)
	if again := storeIDAt(t, path); again != id {
		t.Fatalf("StoreID after reopen = %q, was %q", again, id)
	}
	if o := storeIDAt(t, other); o == id {
		t.Fatalf("two stores share the StoreID %q", id)
	}
	s := openAt(t, path)
	acquireRelease(t, s, "k")
	backup := backupTo(t, s)
	must(t, s.Close())
	restored := filepath.Join(t.TempDir(), "lease.db")
	_, err := boltstore.Restore(backup, restored)
	must(t, err)
	if r := storeIDAt(t, restored); r != id {
		t.Fatalf("StoreID of the restored store = %q, the store backed up had %q", r, id)
	}
}

// TestStoreIDWrittenForOldStore: a store written before the id was kept
// gets one at its next Open, and keeps it.
func TestStoreIDWrittenForOldStore(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	first := storeIDAt(t, path)
	writeBolt(t, path, func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Delete([]byte("store-id")) })
	id := storeIDAt(t, path)
	if id == first {
		t.Fatalf("StoreID %q again after it was deleted: not written anew", id)
	}
	if again := storeIDAt(t, path); again != id {
		t.Fatalf("StoreID after reopen = %q, was %q: not kept", again, id)
	}
}

// TestStoreIDDamaged: an id that fails its checksum (every copy of it in
// the file) is damage, refused; accepting the loss gives the store a new
// id. So does a bbolt file that cannot be opened, moved aside by
// AcceptLogLoss: its id is not read out of its bytes (a key or an owner
// could forge another store's there), even when a copy is intact.
func TestStoreIDDamaged(t *testing.T) {
	t.Parallel()
	accept := boltstore.AcceptLogLoss(func(*boltstore.CorruptError) {})
	t.Run("id flipped", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "lease.db")
		id := storeIDAt(t, path)
		b, err := os.ReadFile(path)
		must(t, err)
		needle := []byte(id[len("bolt:"):])
		n := bytes.Count(b, needle)
		if n == 0 {
			t.Fatalf("id %s not found in %s", needle, path)
		}
		// Its first hex digit changed: to "0", or to "1" where it is "0"
		// already (one id in 16), which left the file whole and the test
		// failing.
		damaged := append([]byte("0"), needle[1:]...)
		if needle[0] == '0' {
			damaged[0] = '1'
		}
		must(t, os.WriteFile(path, bytes.ReplaceAll(b, needle, damaged), 0o600))
		_, err = boltstore.Open(path)
		if !errors.Is(err, boltstore.ErrCorrupt) {
			t.Fatalf("Open with the id damaged: %v, want ErrCorrupt", err)
		}
		got := storeIDAt(t, path, accept)
		if got == id {
			t.Fatalf("StoreID %q kept though every copy failed its checksum", got)
		}
		if again := storeIDAt(t, path); again != got {
			t.Fatalf("StoreID after reopen = %q, was %q", again, got)
		}
	})
	t.Run("file moved aside", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "lease.db")
		id := storeIDAt(t, path)
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		must(t, err)
		_, err = f.WriteAt(make([]byte, 2*4096), 0) // bbolt's meta pages
		must(t, err)
		must(t, f.Close())
		if got := storeIDAt(t, path, accept); got == id {
			t.Fatalf("StoreID after the file was moved aside = %q, the old file's, read out of its bytes", got)
		}
		if matches, _ := filepath.Glob(path + ".damaged-*"); len(matches) != 1 {
			t.Fatalf("damaged files beside %s: %q, want one", path, matches)
		}
	})
}
