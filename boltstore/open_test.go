package boltstore_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
)

// openWithin calls Open in a goroutine and fails the test if it has not
// returned within a generous bound: the property under test is "no hang", not
// speed.
func openWithin(t *testing.T, path string, opts ...boltstore.Option) (*boltstore.Store, error) {
	t.Helper()
	type res struct {
		s   *boltstore.Store
		err error
	}
	ch := make(chan res, 1)
	go func() {
		s, err := boltstore.Open(path, opts...)
		ch <- res{s, err}
	}()
	select {
	case r := <-ch:
		if r.s != nil {
			t.Cleanup(func() { _ = r.s.Close() })
		}
		return r.s, r.err
	case <-time.After(30 * time.Second):
		t.Fatalf("Open(%q) hung for 30 s", path)
		return nil, nil
	}
}

// wantOpenError checks that opening path fails with an error matching
// lease.ErrUnavailable whose message names path and contains every fragment.
func wantOpenError(t *testing.T, path string, fragments ...string) error {
	t.Helper()
	s, err := openWithin(t, path, boltstore.WithLockTimeout(200*time.Millisecond))
	if err == nil {
		t.Fatalf("Open(%q) succeeded (%p), want an error", path, s)
	}
	if !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("Open error %q does not match lease.ErrUnavailable", err)
	}
	msg := err.Error()
	t.Logf("Open error: %s", msg)
	if !strings.HasPrefix(msg, "boltstore: ") {
		t.Errorf("Open error %q does not start with the package name", msg)
	}
	for _, f := range append([]string{path}, fragments...) {
		if !strings.Contains(msg, f) {
			t.Errorf("Open error %q does not contain %q", msg, f)
		}
	}
	return err
}

func TestOpenLockedInProcess(t *testing.T) {
	t.Parallel()
	_, path := open(t)
	err := wantOpenError(t, path, "is locked by another process (is another lease serve running?)")
	if !errors.Is(err, berrors.ErrTimeout) {
		t.Errorf("lock error %v does not wrap bbolt's timeout", err)
	}
}

func TestOpenLockedByOtherProcess(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=hold:"+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	wantOpenError(t, path, "is locked by another process")

	// Once the other process lets go, the file opens.
	_ = stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if _, err := openWithin(t, path); err != nil {
		t.Fatalf("Open after the other process exited: %v", err)
	}
}

func TestOpenGarbage(t *testing.T) {
	t.Parallel()
	random := func(n int) []byte { b := make([]byte, n); _, _ = rand.Read(b); return b }
	for _, tc := range []struct {
		name     string
		content  []byte
		fragment string
	}{
		{"random 64 KiB", random(64 << 10), "corrupt or not a bbolt database"},
		{"random 10 bytes", random(10), "corrupt or not a bbolt database"},
		{"text", []byte(strings.Repeat("not a database\n", 1000)), "corrupt or not a bbolt database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lease.db")
			if err := os.WriteFile(path, tc.content, 0o600); err != nil {
				t.Fatal(err)
			}
			wantOpenError(t, path, tc.fragment)
		})
	}
}

// TestOpenCorruptPages damages a real store's data pages and keeps its meta
// pages, so bbolt itself opens the file; the consistency check must refuse it.
func TestOpenCorruptPages(t *testing.T) {
	t.Parallel()
	s, path := open(t)
	for i := range 300 {
		if _, err := s.Acquire(t.Context(), strings.Repeat("k", 100)+string(rune('a'+i%26))+strings.Repeat("x", i), "o", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	if len(data) < 6*page {
		t.Fatalf("store file only %d bytes; the test needs data pages to damage", len(data))
	}
	_, _ = rand.Read(data[2*page:])
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	wantOpenError(t, path, "corrupt")
}

func TestOpenNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	writeBolt(t, path, func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return b.Put([]byte("version"), []byte{0, 0, 0, 0, 0, 0, 0, 99})
	})
	wantOpenError(t, path, "schema version 99", "newer")
}

func TestOpenForeignBolt(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "other.db")
	writeBolt(t, path, func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("somebody-else"))
		return err
	})
	wantOpenError(t, path, "not a lease store")
}

func TestOpenDirectory(t *testing.T) {
	t.Parallel()
	wantOpenError(t, t.TempDir(), "cannot open")
}

func TestOpenBadArguments(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "lease.db")
	for name, tc := range map[string]struct {
		path string
		opts []boltstore.Option
	}{
		"empty path":       {"", nil},
		"nil option":       {path, []boltstore.Option{nil}},
		"nil clock":        {path, []boltstore.Option{boltstore.WithClock(nil)}},
		"zero timeout":     {path, []boltstore.Option{boltstore.WithLockTimeout(0)}},
		"negative timeout": {path, []boltstore.Option{boltstore.WithLockTimeout(-time.Second)}},
		"nil loss report":  {path, []boltstore.Option{boltstore.AcceptLogLoss(nil)}},
	} {
		s, err := boltstore.Open(tc.path, tc.opts...)
		if !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: Open = %p, %v; want ErrInvalid", name, s, err)
		}
		if s != nil {
			_ = s.Close()
		}
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Open created %s: %v", path, err)
	}
}

func TestClosedStore(t *testing.T) {
	t.Parallel()
	s, _ := open(t)
	l, err := s.Acquire(t.Context(), "k", "o", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	errs := map[string]error{}
	_, errs["Acquire"] = s.Acquire(t.Context(), "k2", "o", time.Minute)
	_, errs["AcquireWait"] = s.AcquireWait(t.Context(), "k2", "o", time.Minute)
	_, errs["Renew"] = s.Renew(t.Context(), l, time.Minute)
	errs["Release"] = s.Release(t.Context(), l)
	_, errs["Get"] = s.Get(t.Context(), "k")
	_, errs["List"] = s.List(t.Context(), "", lease.Page{})
	for name, err := range errs {
		if !errors.Is(err, lease.ErrUnavailable) {
			t.Errorf("%s after Close: err = %v, want ErrUnavailable", name, err)
		}
	}
}

func writeBolt(t *testing.T, path string, fn func(*bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenFIFO: a FIFO where the file or its log should be fails Open at
// once; reading the log from one used to block Open forever.
func TestOpenFIFO(t *testing.T) {
	t.Parallel()
	for _, suffix := range []string{"", "-wal"} {
		path := filepath.Join(t.TempDir(), "lease.db")
		if err := syscall.Mkfifo(path+suffix, 0o600); err != nil {
			t.Fatal(err)
		}
		wantOpenError(t, path, "a FIFO, not a regular file")
	}
}

// renameBucket gives a top-level bucket of the bbolt file at path another
// name, as a bit flipped in its name in the root page does.
func renameBucket(t *testing.T, path, from, to string) {
	t.Helper()
	writeBolt(t, path, func(tx *bolt.Tx) error {
		src := tx.Bucket([]byte(from))
		if src == nil {
			return fmt.Errorf("no bucket %q", from)
		}
		dst, err := tx.CreateBucket([]byte(to))
		if err != nil {
			return err
		}
		if err := src.ForEach(func(k, v []byte) error { return dst.Put(k, v) }); err != nil {
			return err
		}
		return tx.DeleteBucket([]byte(from))
	})
}

// TestOpenRenamedBucket: a store whose meta or leases bucket lost its name
// (one bit flipped in the root page: "mdta", "leasds") is refused as
// damaged, with the way out, not taken for a foreign file or opened with a
// new, empty leases bucket that forgets the leases held; AcceptLogLoss
// then moves it aside and starts above every token it could have issued.
func TestOpenRenamedBucket(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ from, to string }{{"meta", "mdta"}, {"leases", "leasds"}} {
		t.Run(tc.from, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lease.db")
			s, err := boltstore.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			l, err := s.Acquire(context.Background(), "held", "o", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			renameBucket(t, path, tc.from, tc.to)
			err = wantOpenError(t, path, "is corrupt", strconv.Quote(tc.to), "--accept-log-loss")
			if !errors.Is(err, boltstore.ErrCorrupt) {
				t.Errorf("Open error %q does not match ErrCorrupt", err)
			}
			s, err = boltstore.Open(path, boltstore.AcceptLogLoss(func(*boltstore.CorruptError) {}))
			if err != nil {
				t.Fatalf("AcceptLogLoss: %v", err)
			}
			defer s.Close()
			next, err := s.Acquire(context.Background(), "held", "o", time.Hour)
			if err != nil || next.Token <= l.Token {
				t.Errorf("after the loss was accepted: token %d (%v), want above %d", next.Token, err, l.Token)
			}
		})
	}
}
