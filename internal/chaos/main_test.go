package chaos_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/pgtest"
)

// TestMain stops pgtest's cluster and fails the binary if goroutines outlive
// the tests. Toxiproxy's links, the engines' connections and an embedded etcd
// member's peer transports end a moment after they are closed, so the check
// waits for them a while before it calls anything a leak.
func TestMain(m *testing.M) {
	code := pgtest.M(m).Run() // stops the throwaway PostgreSQL
	if code == 0 {
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := goleak.Find()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "chaos: goroutines still running after the tests: %v\n", err)
				code = 1
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	os.Exit(code)
}
