package scalebench

import (
	"os"
	"testing"

	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		fillChild() // the kill -9 recovery's store-filling process; never returns
	}
	etcdtest.VerifyTestMain(m)
}
