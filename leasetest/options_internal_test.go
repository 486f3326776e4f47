package leasetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// TestOptionsRefuseNonsense: an option given nonsense fails the suite
// rather than run it with a default the caller did not ask for (a zero
// ExpiryTTL would have the suite acquire leases with an invalid TTL; a
// zero Settle, give up on expiry at once).
func TestOptionsRefuseNonsense(t *testing.T) {
	for name, opt := range map[string]Option{
		"nil option":         nil,
		"zero ExpiryTTL":     ExpiryTTL(0),
		"ExpiryTTL < MinTTL": ExpiryTTL(lease.MinTTL - 1),
		"ExpiryTTL > MaxTTL": ExpiryTTL(lease.MaxTTL + 1),
		"zero Settle":        Settle(0),
		"negative Settle":    Settle(-time.Second),
		"nil Reopen":         Reopen(nil),
		"zero WatchBuffer":   WatchBuffer(0),
		"zero expiry bound":  WatchExpiryBound(0),
	} {
		if _, err := newConfig([]Option{opt}); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	cfg, err := newConfig([]Option{ExpiryTTL(time.Second), Settle(3 * time.Second), WatchBuffer(7), WatchExpiryBound(time.Minute)})
	if err != nil || cfg.expiryTTL != time.Second || cfg.settle != 3*time.Second || cfg.watchBuffer != 7 || cfg.watchExpiryBound != time.Minute {
		t.Errorf("valid options: %+v, %v", cfg, err)
	}
}
