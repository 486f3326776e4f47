package poll_test

import (
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease/internal/testkit/poll"
)

func TestErrReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		err := poll.Err(time.Second, func() error {
			calls++
			if time.Since(start) < 50*time.Millisecond {
				return errors.New("early")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Looks at 0, 1, 3, 7, 15, 31 and 51 ms (gaps of 1, 2, 4, 8, 16, then 20).
		if took := time.Since(start); took != 51*time.Millisecond || calls != 7 {
			t.Fatalf("met after %v and %d calls, want 51ms and 7", took, calls)
		}
	})
}

func TestErrGivesTheLastErrorAfterPatience(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		err := poll.Err(100*time.Millisecond, func() error {
			n++
			return errors.New("try " + strings.Repeat("i", n))
		})
		if err == nil || !strings.HasSuffix(err.Error(), "try "+strings.Repeat("i", n)) || !strings.HasPrefix(err.Error(), "after 100ms: ") {
			t.Fatalf("err %v after %d calls", err, n)
		}
		if took := time.Since(start); took <= 100*time.Millisecond || took > 120*time.Millisecond {
			t.Fatalf("gave up after %v, want just past 100ms", took)
		}
	})
}
