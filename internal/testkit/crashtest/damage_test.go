package crashtest

import (
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/disktest"
)

// TestDamagedLog is issue 22's report, on the binary: 31 tokens on a key,
// `kill -9`, 4 bytes of lease.db-wal overwritten (at offset 0, or at 200),
// restart. The server used to start without a word and issue token 10 (or
// 12) again. It must refuse to start, with one line naming the log and
// --accept-log-loss, or start and issue only tokens above 31; and with
// --accept-log-loss it must start and issue only tokens above 31.
func TestDamagedLog(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lease and kills it; skipped in -short")
	}
	bin := buildLease(t)
	for _, off := range []int64{0, 200} {
		t.Run(fmt.Sprint("at ", off), func(t *testing.T) {
			dataDir := filepath.Join(t.TempDir(), "data")
			srv := startServer(t, bin, dataDir)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			c := &client{base: srv.url, http: &http.Client{Transport: tr, Timeout: requestLimit}, owner: "o", h: &History{}}
			var last uint64
			for range 31 {
				a, err := c.acquire(t.Context(), "k", time.Minute, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := c.release(t.Context(), "k", a); err != nil {
					t.Fatal(err)
				}
				last = a.Token
			}
			srv.kill(t)
			tr.CloseIdleConnections()

			wal := filepath.Join(dataDir, "lease.db-wal")
			disktest.Overwrite(t, wal, off)

			// The restart: it exits, or it serves.
			cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir)
			done := make(chan struct{})
			var (
				out []byte
				err error
			)
			go func() { out, err = cmd.CombinedOutput(); close(done) }()
			select {
			case <-done:
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() == 0 {
					t.Fatalf("lease serve on a damaged log ended with %v; want a non-zero exit", err)
				}
				var lines []string
				for _, l := range strings.Split(string(out), "\n") {
					if strings.HasPrefix(l, "lease: ") {
						lines = append(lines, l)
					}
				}
				if len(lines) != 1 || !strings.Contains(lines[0], wal) || !strings.Contains(lines[0], "--accept-log-loss") {
					t.Fatalf("lease serve on a damaged log said %q; want one line naming %s and --accept-log-loss", out, wal)
				}
				t.Logf("exit %d: %s", ee.ExitCode(), lines[0])
			case <-time.After(startBound):
				_ = cmd.Process.Kill()
				<-done
				t.Log("lease serve started on the damaged log") // then it must not issue old tokens
				srv = startServer(t, bin, dataDir)
				c.base = srv.url
				if a, err := c.acquire(t.Context(), "k", time.Minute, 0); err != nil || a.Token <= last {
					t.Fatalf("after the restart k got %v, %v; token %d was issued before (I1)", a, err, last)
				}
				srv.stop(t)
				return
			}

			srv = startServer(t, bin, dataDir, "--accept-log-loss")
			defer srv.stop(t)
			c.base = srv.url
			a, err := c.acquire(t.Context(), "k", time.Minute, 0)
			if err != nil || a.Token <= last {
				t.Fatalf("with --accept-log-loss k got %v, %v; token %d was issued before (I1)", a, err, last)
			}
			if !strings.Contains(srv.logText(), "level=ERROR msg=\"--accept-log-loss") {
				t.Errorf("no ERROR line about the loss in:\n%s", srv.logText())
			}
			t.Logf("with --accept-log-loss: token %d after %d", a.Token, last)
		})
	}
}
