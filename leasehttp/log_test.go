package leasehttp_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
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
	_, hs := startServer(t, brokenBackend{backendOnly{memstore.New()}}, leasehttp.WithLogger(log),
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
