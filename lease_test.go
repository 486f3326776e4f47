package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehq/lease"
)

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{"job", true},
		{"a/b/c", true},
		{"ünïcødé 日本語 🔒", true},
		{strings.Repeat("k", lease.MaxKeyLen), true},
		{"", false},
		{strings.Repeat("k", lease.MaxKeyLen+1), false},
		{"tab\there", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"c1\u0085", false},
		{"bad\xffutf8", false},
	} {
		err := lease.ValidateKey(tc.key)
		if tc.ok && err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", tc.key, err)
		}
		if !tc.ok && !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalid", tc.key, err)
		}
	}
}

func TestValidateTTL(t *testing.T) {
	for ttl, ok := range map[time.Duration]bool{
		lease.MinTTL: true, lease.MaxTTL: true, time.Second: true,
		0: false, -time.Second: false, lease.MinTTL - 1: false, lease.MaxTTL + 1: false,
	} {
		if err := lease.ValidateTTL(ttl); (err == nil) != ok || (err != nil && !errors.Is(err, lease.ErrInvalid)) {
			t.Errorf("ValidateTTL(%v) = %v, want ok=%v", ttl, err, ok)
		}
	}
}

func TestIDRoundTrip(t *testing.T) {
	seen := map[lease.ID]bool{}
	for range 1000 {
		id := lease.NewID()
		if id.IsZero() || seen[id] {
			t.Fatalf("NewID returned zero or a repeat: %v", id)
		}
		seen[id] = true
		back, err := lease.ParseID(id.Reveal())
		if err != nil || back != id {
			t.Fatalf("ParseID(%q) = %v, %v", id.Reveal(), back, err)
		}
	}
	for _, bad := range []string{"", "00", strings.Repeat("0", 32), strings.Repeat("g", 32), strings.Repeat("a", 33)} {
		if _, err := lease.ParseID(bad); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("ParseID(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestHeldErrorMatchesErrHeld(t *testing.T) {
	var err error = &lease.HeldError{Key: "job", Owner: "a", Token: 3}
	if !errors.Is(err, lease.ErrHeld) || errors.Is(err, lease.ErrNotHeld) {
		t.Fatalf("HeldError matching is wrong: %v", err)
	}
	if !strings.HasPrefix(err.Error(), "lease: ") {
		t.Errorf("message %q does not start with the package name", err)
	}
}

func FuzzValidateKey(f *testing.F) {
	for _, s := range []string{"job", "", "a\x00", "日本", "\xff", strings.Repeat("x", 513)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := lease.ValidateKey(key)
		if err != nil {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if key == "" || len(key) > lease.MaxKeyLen || !utf8.ValidString(key) {
			t.Fatalf("accepted %q", key)
		}
		for _, r := range key {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) {
				t.Fatalf("accepted control character %U in %q", r, key)
			}
		}
	})
}

func FuzzParseID(f *testing.F) {
	f.Add(lease.NewID().Reveal())
	f.Add("zz")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := lease.ParseID(s)
		if err != nil {
			if !errors.Is(err, lease.ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if id.IsZero() || !strings.EqualFold(id.Reveal(), s) {
			t.Fatalf("ParseID(%q) = %v", s, id)
		}
	})
}

// TestIDNeverPrints: no fmt verb shows a lease's secret, on its own or
// inside a Lease, so an ID that reaches a log line gives nothing away.
func TestIDNeverPrints(t *testing.T) {
	id := lease.NewID()
	l := lease.Lease{Key: "k", Owner: "w", Token: 7, ID: id, TTL: time.Second}
	secret := id.Reveal()
	upper := strings.ToUpper(secret)
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%o", "%b", "%08x"} {
		for _, arg := range []any{id, &id, l, &l} {
			out := fmt.Sprintf(format, arg)
			if strings.Contains(out, secret) || strings.Contains(out, upper) || strings.Contains(out, fmt.Sprint(id[:])) {
				t.Errorf("Sprintf(%q, %T) = %s: shows the secret", format, arg, out)
			}
		}
	}
	if !strings.Contains(fmt.Sprintf("%+v", l), "ID:[redacted]") {
		t.Errorf("%%+v of a lease = %+v, want its ID shown as [redacted]", l)
	}
	if strings.Contains(fmt.Sprintf("%+v", l), "_:") {
		t.Errorf("%%+v of a lease = %+v: shows a padding field", l)
	}
	if len(secret) != 32 || strings.Trim(secret, "0123456789abcdef") != "" {
		t.Errorf("Reveal() = %q, want 32 lowercase hex digits", secret)
	}
}
