package boltstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/leasehq/lease/boltstore"
)

// Tokens keep rising across release and restart: the file remembers the
// highest token of every key.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "boltstore-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "lease.db")
	ctx := context.Background()

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
		fmt.Printf("run %d: token %d\n", run, l.Token)
		if err := s.Release(ctx, l); err != nil {
			fmt.Println(err)
		}
		if err := s.Close(); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// run 1: token 1
	// run 2: token 2
}
