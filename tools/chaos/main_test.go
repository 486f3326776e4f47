package chaos_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehq/lease/internal/testkit/mysqltest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
)

// thirdPartyLeaks are goroutines that outlive the tests through no code of
// this repository, seen in `make chaos` runs:
//   - toxiproxy v2.12.0: a link stage (NoopToxic.Pipe, under ToxicStub.Run)
//     whose connection died while toxics were being added or removed stays
//     blocked sending to the next stage, which has stopped reading; and the
//     link's reader (ToxicLink.read) likewise, blocked writing into the
//     first stage's channel;
//   - etcd v3.7.3 embed: on a member killed with HardStop, a peer's
//     /version request stays blocked in StorageVersion on the closed
//     backend's read lock.
var thirdPartyLeaks = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
	goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).StorageVersion"),
}

// TestMain stops pgtest's cluster and mysqltest's server, and fails the
// binary if goroutines outlive the tests. Toxiproxy's links, the engines'
// connections and an embedded etcd member's peer transports end a moment
// after they are closed, so the check waits for them a while before it calls
// anything a leak.
func TestMain(m *testing.M) {
	code := mysqltest.M(pgtest.M(m)).Run() // stops the throwaway PostgreSQL and MariaDB
	removeLeaseBinary()
	if code == 0 {
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := goleak.Find(thirdPartyLeaks...)
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
