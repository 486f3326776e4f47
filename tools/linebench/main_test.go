package linebench_test

import (
	"os"
	"testing"

	"github.com/leasehq/lease/internal/testkit/pgtest"
)

// TestMain stops the throwaway PostgreSQL the hand-off benchmark starts.
func TestMain(m *testing.M) { os.Exit(pgtest.M(m).Run()) }
