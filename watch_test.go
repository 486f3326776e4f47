package lease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/leasehq/lease"
)

func TestEventKindNames(t *testing.T) {
	seen := map[string]bool{}
	for k := lease.Held; k <= lease.Expired; k++ {
		name := k.String()
		if name == "unknown" || seen[name] {
			t.Errorf("kind %d is named %q", k, name)
		}
		seen[name] = true
		back, err := lease.ParseEventKind(name)
		if err != nil || back != k {
			t.Errorf("ParseEventKind(%q) = %v, %v; want %v", name, back, err, k)
		}
	}
	for _, bad := range []string{"", "unknown", "Acquired", "expire"} {
		if _, err := lease.ParseEventKind(bad); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("ParseEventKind(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	// Resync, Follow's own, has a name but is no kind of the wire's.
	if got := lease.Resync.String(); got != "resync" {
		t.Errorf("Resync is named %q, want resync", got)
	}
	if k, err := lease.ParseEventKind("resync"); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("ParseEventKind(resync) = %v, %v; want ErrInvalid", k, err)
	}
	if got := lease.EventKind(0).String(); got != "unknown" {
		t.Errorf("EventKind(0) = %q, want unknown", got)
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, ok := range []string{"", "jobs/", "a", strings.Repeat("k", lease.MaxKeyLen)} {
		if err := lease.ValidatePrefix(ok); err != nil {
			t.Errorf("ValidatePrefix(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"\x00", "a\nb", "\xff", strings.Repeat("k", lease.MaxKeyLen+1)} {
		if err := lease.ValidatePrefix(bad); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("ValidatePrefix(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}
