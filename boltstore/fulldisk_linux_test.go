package boltstore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/disktest"
)

func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestFullDisk: on a full disk a start fails and leaves no file behind (a
// bbolt file cut short by a full disk used to stay, and the next start,
// with room, crashed on it); a running store that fills the disk stops;
// and once there is room again a restart recovers every token it
// acknowledged.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	dir, resize := disktest.SmallDisk(t, 8<<10)
	path := filepath.Join(dir, "lease.db")
	// 8 KiB: bbolt cannot write its first pages; 64 KiB: the log cannot
	// allocate its first chunk.
	for _, size := range []int{8 << 10, 64 << 10} {
		resize(size)
		if s, err := boltstore.Open(path); err == nil {
			_ = s.Close()
			t.Fatalf("Open on a %d KiB disk succeeded; the test needs it to fail", size>>10)
		} else if !errors.Is(err, lease.ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Open on a %d KiB disk: %v; want ErrUnavailable wrapping ENOSPC", size>>10, err)
		} else {
			t.Logf("Open on a %d KiB disk: %v", size>>10, err)
		}
		if left := entries(t, dir); len(left) > 0 {
			t.Fatalf("a failed start on a %d KiB disk left %v behind", size>>10, left)
		}
	}

	resize(16 << 20) // the log takes 5 MiB
	s, err := boltstore.Open(path)
	if err != nil {
		t.Fatalf("Open with room: %v", err)
	}
	// Leave about 100 KiB free; leases with long keys fill it.
	filler := filepath.Join(dir, "filler")
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-100<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	acked := map[string]lease.Token{}
	var failure error
	for i := 0; failure == nil; i++ {
		if i == 100000 {
			t.Fatal("100000 leases fit in 100 KiB")
		}
		key := fmt.Sprintf("%0500d", i)
		l, err := s.Acquire(t.Context(), key, strings.Repeat("o", 500), time.Hour)
		if err != nil {
			failure = err
			break
		}
		acked[key] = l.Token
	}
	if !errors.Is(failure, lease.ErrUnavailable) || !errors.Is(failure, syscall.ENOSPC) {
		t.Fatalf("filling the disk: %v; want ErrUnavailable wrapping ENOSPC", failure)
	}
	t.Logf("%d leases, then %v", len(acked), failure)
	if err := s.Close(); !errors.Is(err, lease.ErrUnavailable) {
		t.Fatalf("Close after the failure: %v, want it", err)
	}

	// Still full: a start may fail, leaving the files as they were.
	if s, err := boltstore.Open(path); err == nil {
		t.Log("Open on the full disk succeeded")
		if err := s.Close(); err != nil {
			t.Logf("Close: %v", err)
		}
	} else {
		t.Logf("Open on the full disk: %v", err)
	}
	if left := entries(t, dir); strings.Join(left, " ") != "filler lease.db lease.db-lead lease.db-wal" {
		t.Fatalf("after a start on the full disk the directory holds %v", left)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s, err = boltstore.Open(path)
	if err != nil {
		t.Fatalf("Open once there is room again: %v", err)
	}
	defer s.Close()
	for key, tok := range acked {
		if l, err := s.Get(t.Context(), key); err != nil || l.Token != tok {
			t.Fatalf("after the restart Get(%.8s…) = %d, %v; want token %d", key, l.Token, err, tok)
		}
	}
}
