package boltstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
)

// Tokens keep rising across release and restart. A new store starts at 1;
// each later start raises every key's tokens above the host clock's
// microseconds, so that a store rolled back (both files copied back)
// cannot issue a token again either.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "boltstore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "lease.db")
	ctx := context.Background()
	start := time.Now()

	var last lease.Token
	for run := 1; run <= 2; run++ {
		s, err := boltstore.Open(path)
		if err != nil {
			fmt.Println(err)
			return
		}
		l, err := s.Acquire(ctx, "nightly-report", "cron@host-a", time.Minute)
		if err != nil {
			fmt.Println(err)
			return
		}
		if run == 1 {
			fmt.Printf("run %d: token %d\n", run, l.Token)
		} else {
			fmt.Printf("run %d: token above %d: %v, above the clock's microseconds at the start: %v\n", run, last, l.Token > last, uint64(l.Token) > uint64(start.UnixMicro()))
		}
		last = l.Token
		if err := s.Release(ctx, l); err != nil {
			fmt.Println(err)
		}
		if err := s.Close(); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// run 1: token 1
	// run 2: token above 1: true, above the clock's microseconds at the start: true
}
