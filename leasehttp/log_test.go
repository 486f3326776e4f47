package leasehttp_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// syncBuffer is a bytes.Buffer safe for the server's handler goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	s.b.Reset()
	return out
}

func TestRequestLog(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	const token = "log-test-token-0123456789"
	_, hs := startServer(t, brokenBackend{backendOnly{memtest.New(t)}}, leasehttp.WithLogger(log),
		leasehttp.WithCredentials([]leasehttp.Credential{{Token: token, Prefixes: []string{"*"}}}))
	c := newClient(t, hs.URL, leasehttp.WithAuthToken(token))

	for _, tc := range []struct {
		name  string
		do    func()
		level string
		route string
	}{
		{"success at debug", func() { _, _ = c.Acquire(ctxFor(t), "log/a", "o", time.Minute) }, "DEBUG", "POST /v1/leases/{key}/acquire"},
		{"refused token at warn", func() { call(t, "GET", hs.URL+"/v1/leases", "wrong", "") }, "WARN", "GET /v1/leases"},
		{"backend failure at error", func() { call(t, "GET", hs.URL+"/v1/leases/log%2Fa", token, "") }, "ERROR", "GET /v1/leases/{key}"},
	} {
		tc.do()
		lines := buf.lines(t)
		if len(lines) != 1 {
			t.Fatalf("%s: %d log lines, want 1: %v", tc.name, len(lines), lines)
		}
		l := lines[0]
		if l["level"] != tc.level || l["route"] != tc.route || l["status"] == nil || l["duration"] == nil {
			t.Errorf("%s: log line %v, want level %s route %s with status and duration", tc.name, l, tc.level, tc.route)
		}
		if s := strings.Join(strings.Fields(strings.ReplaceAll(strings.ReplaceAll(jsonString(l), "{", " "), "}", " ")), " "); strings.Contains(s, token) {
			t.Errorf("%s: the log line shows the bearer token: %v", tc.name, l)
		}
	}
}

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestRequestLogSaysAFailureOnce: a backend that fails every request the
// same way (a store on a full disk) gets one ERROR line, at the first, not
// one per request, and no line carries a long key whole.
func TestRequestLogSaysAFailureOnce(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, hs := startServer(t, brokenBackend{backendOnly{memtest.New(t)}}, leasehttp.WithLogger(log))
	key := strings.Repeat("k", 63) + "é" + strings.Repeat("k", 447) // 512 bytes, a character across byte 64
	for range 10 {
		if status, _ := call(t, "GET", hs.URL+"/v1/leases/"+url.PathEscape(key), "", ""); status != 503 {
			t.Fatalf("GET over a failing backend: HTTP %d, want 503", status)
		}
	}
	lines := buf.lines(t)
	errorLines := 0
	for _, l := range lines {
		if l["level"] == "ERROR" {
			errorLines++
		}
		k, _ := l["key"].(string)
		if !strings.HasPrefix(key, strings.TrimSuffix(k, "…")) || len(k) > 64+len("…") {
			t.Errorf("log line shows key %q (%d bytes), want at most its first 64 bytes", k, len(k))
		}
	}
	if len(lines) != 10 || errorLines != 1 {
		t.Fatalf("%d log lines, %d at ERROR; want 10, one at ERROR: %v", len(lines), errorLines, lines)
	}
}
