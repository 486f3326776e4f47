package leasehttp

import (
	"net/http"
	"testing"
	"time"
)

// TestRetryAfterOf reads both forms of Retry-After, and bounds what it
// honours.
func TestRetryAfterOf(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		v    string
		want time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 0 ", 0},
		{"3600", maxRetryAfter},
		{"-1", 0},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second},
		{now.Add(-5 * time.Second).Format(http.TimeFormat), 0},
		{now.Add(24 * time.Hour).Format(http.TimeFormat), maxRetryAfter},
	} {
		h := http.Header{}
		if tc.v != "" {
			h.Set("Retry-After", tc.v)
		}
		if got := retryAfterOf(h, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.v, got, tc.want)
		}
	}
}
