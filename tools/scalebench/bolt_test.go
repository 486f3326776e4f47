package scalebench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/internal/testkit/benchutil"
)

// The kill -9 recovery: a child process (this test binary, childEnv set)
// fills a boltstore with idle leases, says so, and is killed with SIGKILL
// while its log holds the batches since its last checkpoint.
const (
	childEnv     = "LEASE_SCALE_CHILD_STORE"
	childLeases  = "LEASE_SCALE_CHILD_LEASES"
	childFillers = 512 // concurrent acquirers: batches of up to 512 per fsync
	childReady   = "filled"
	fillTimeout  = 10 * time.Minute
)

// fillChild fills the store at $LEASE_SCALE_CHILD_STORE with
// $LEASE_SCALE_CHILD_LEASES idle leases, prints childReady, and waits to
// be killed.
func fillChild() {
	n, err := strconv.Atoi(os.Getenv(childLeases))
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench child:", err)
		os.Exit(2)
	}
	s, err := boltstore.Open(os.Getenv(childEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench child:", err)
		os.Exit(2)
	}
	if err := fill(s, n); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench child:", err)
		os.Exit(2)
	}
	fmt.Println(childReady)
	select {} // until SIGKILL: no Close, no last checkpoint
}

// fill acquires idle leases 0..n-1 on b from childFillers goroutines.
func fill(b lease.Backend, n int) error { return acquireAll(b, n, idleKey, lease.MaxTTL, false) }

// acquireAll acquires key(0)..key(n-1) on b from childFillers goroutines,
// each for ttl, releasing each at once if release.
func acquireAll(b lease.Backend, n int, key func(int) string, ttl time.Duration, release bool) error {
	ctx := context.Background()
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	for range childFillers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				l, err := b.Acquire(ctx, key(i), "worker-1", ttl)
				if err == nil && release {
					err = b.Release(ctx, l)
				}
				if err != nil {
					errOnce.Do(func() { first = err })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// fullBoltstore returns a boltstore holding n idle leases, filled by a
// child process killed with SIGKILL and reopened here, and closed when tb
// ends; how long that Open took; and the file's bytes per lease.
func fullBoltstore(tb testing.TB) (s *boltstore.Store, open time.Duration, disk float64) {
	tb.Helper()
	n := idleLeases(tb)
	path := filepath.Join(tb.TempDir(), "lease.db")
	if err := fillAndKill(path, n); err != nil {
		tb.Fatalf("scalebench: filling a boltstore: %v", err)
	}
	start := time.Now()
	s, err := boltstore.Open(path)
	open = time.Since(start)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return s, open, float64(fi.Size()) / float64(n)
}

func fillAndKill(path string, n int) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path, childLeases+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == childReady {
				ready <- nil
				return
			}
		}
		ready <- fmt.Errorf("the filling process ended without filling the store: %v", sc.Err())
	}()
	select {
	case err = <-ready:
	case <-time.After(fillTimeout):
		err = fmt.Errorf("the filling process did not fill %d leases in %v", n, fillTimeout)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	return err
}

// BenchmarkCompareScaleBolt: acquire+release pairs on 1,024 keys of their
// own in an empty boltstore and in one holding a million idle leases,
// interleaved; the file's bytes per idle lease; and how long Open of that
// store takes after the process that filled it was killed with SIGKILL.
func BenchmarkCompareScaleBolt(b *testing.B) {
	ctx := context.Background()
	empty, err := boltstore.Open(filepath.Join(b.TempDir(), "lease.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	full, open, disk := fullBoltstore(b)
	pair := func(s *boltstore.Store) func(w int) error {
		i := 0
		return func(int) error {
			l, err := s.Acquire(ctx, activeKeys[i&1023], "bench", time.Minute)
			i++
			if err != nil {
				return err
			}
			return s.Release(ctx, l)
		}
	}
	b.Run("c=1/interleaved", func(b *testing.B) {
		benchutil.Interleave(b, 1, []benchutil.Impl{
			{Name: "bolt-empty", Op: pair(empty)},
			{Name: "bolt-1M-idle", Op: pair(full)},
		})
		b.ReportMetric(disk, "bolt-1M-idle:disk-B/lease")
	})
	b.Run("c=1/bolt-1M-list-1000", func(b *testing.B) { listPages(b, full, idleLeases(b)) })
	b.Run("c=1/open-after-kill", func(b *testing.B) {
		for b.Loop() {
		}
		b.ReportMetric(float64(open.Nanoseconds()), "ns/op")
		b.ReportMetric(open.Seconds(), "open-s")
	})
}
