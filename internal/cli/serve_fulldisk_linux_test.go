package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/disktest"
)

// TestServeFullDisk: when the embedded store's disk fills up, the server
// answers 503 and logs the failure once at ERROR, not once per request
// with each request's whole key; once there is room again, a restart
// recovers every lease it acknowledged.
func TestServeFullDisk(t *testing.T) {
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	cfg.DataDir, _ = disktest.SmallDisk(t, 16<<20) // the log takes 5 MiB
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(cfg.DataDir, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(cfg.DataDir, "filler")
	if err := os.WriteFile(filler, make([]byte, int64(st.Bavail)*st.Bsize-100<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	c := httpClient(t, "http://"+s.Addr())
	acked := map[string]lease.Token{}
	for i := 0; ; i++ {
		if i == 10000 {
			t.Fatal("10000 leases fit in 100 KiB")
		}
		key := fmt.Sprintf("%0500d", i)
		l, err := c.Acquire(t.Context(), key, strings.Repeat("o", 500), time.Hour)
		if errors.Is(err, lease.ErrUnavailable) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		acked[key] = l.Token
	}
	long := strings.Repeat("x", lease.MaxKeyLen)
	for range 20 {
		if _, err := c.Acquire(t.Context(), long, "o", time.Hour); !errors.Is(err, lease.ErrUnavailable) {
			t.Fatalf("Acquire on the full disk: %v, want ErrUnavailable", err)
		}
	}
	if err := s.Close(); !errors.Is(err, lease.ErrUnavailable) {
		t.Errorf("Close after the failure: %v, want it", err)
	}
	out := logs.String()
	if n := strings.Count(out, `level=ERROR msg="leasehttp: request"`); n != 1 {
		t.Errorf("%d ERROR lines for failed requests, want 1:\n%s", n, out)
	}
	if strings.Contains(out, long) {
		t.Errorf("a log line shows a whole %d-byte key", len(long))
	}
	t.Logf("%d leases before the disk filled", len(acked))

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, cfg)
	c = httpClient(t, "http://"+s.Addr())
	for key, tok := range acked {
		if l, err := c.Get(t.Context(), key); err != nil || l.Token != tok {
			t.Fatalf("after the restart Get(%.8s…) = %d, %v; want token %d", key, l.Token, err, tok)
		}
	}
}
