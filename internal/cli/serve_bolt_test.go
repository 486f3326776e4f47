package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/disktest"
)

// takeTokens acquires and releases key n times through the server at base
// and returns the last token.
func takeTokens(t *testing.T, base, key string, n int) lease.Token {
	t.Helper()
	c := httpClient(t, base)
	var last lease.Token
	for range n {
		l, err := c.Acquire(t.Context(), key, "o", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(t.Context(), l); err != nil {
			t.Fatal(err)
		}
		last = l.Token
	}
	return last
}

// errorLine fails unless stderr holds exactly one error line (the server
// may have logged before it failed) and it mentions each of wants.
func errorLine(t *testing.T, r result, wants ...string) {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.HasPrefix(l, "lease: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 {
		t.Fatalf("stderr has %d error lines, want one: %q", len(lines), r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(lines[0], w) {
			t.Errorf("error %q does not mention %q", lines[0], w)
		}
	}
}

// TestServeDamagedLog: `lease serve` on a data directory whose log is
// damaged exits with status 1 and one line that names the log, the offset
// and --accept-log-loss; with --accept-log-loss it starts, says loudly
// what it gave up, and issues only tokens above every one issued before,
// for known keys and new ones; after that it starts without the flag.
func TestServeDamagedLog(t *testing.T) {
	for _, off := range []int64{0, 200} {
		t.Run(fmt.Sprint("at ", off), func(t *testing.T) {
			var logs syncBuffer
			cfg := serveConfig(t, &logs)
			s := startServe(t, cfg)
			last := takeTokens(t, "http://"+s.Addr(), "k", 31)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			wal := filepath.Join(cfg.DataDir, BoltFile+"-wal")
			disktest.Overwrite(t, wal, off)

			r := cli(t, nil, nil, nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", cfg.DataDir)
			if r.code != ExitFailure {
				t.Fatalf("lease serve on a damaged log: exit %d, want %d; stderr %q", r.code, ExitFailure, r.stderr)
			}
			errorLine(t, r, wal, "damaged at offset", "--accept-log-loss")
			t.Logf("stderr: %s", r.stderr)

			cfg.AcceptLogLoss = true
			s = startServe(t, cfg)
			out := logs.String()
			m := regexp.MustCompile(`level=ERROR msg="--accept-log-loss: [^"]*".* token_floor=(\d+)`).FindStringSubmatch(out)
			if m == nil || !strings.Contains(out, "log="+wal) {
				t.Fatalf("no ERROR line naming the log and the token floor in %q", out)
			}
			t.Logf("log: %s", m[0])
			floor, _ := strconv.ParseUint(m[1], 10, 64)
			if lease.Token(floor) < last {
				t.Errorf("token floor %d is below the last token issued, %d", floor, last)
			}
			for _, key := range []string{"k", "new"} {
				if got := takeTokens(t, "http://"+s.Addr(), key, 1); got <= lease.Token(floor) || got <= last {
					t.Errorf("after --accept-log-loss %s got token %d; the floor is %d and %d was issued on k", key, got, floor, last)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// The log is whole now: the flag changes nothing, and says so.
			s = startServe(t, cfg)
			if got := takeTokens(t, "http://"+s.Addr(), "k", 1); got <= lease.Token(floor) {
				t.Errorf("after a restart k got token %d, below the floor %d", got, floor)
			}
			if !strings.Contains(logs.String(), `level=WARN msg="--accept-log-loss: the log is not damaged`) {
				t.Errorf("no warning that --accept-log-loss had nothing to accept in %q", logs.String())
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			cfg.AcceptLogLoss = false
			s = startServe(t, cfg)
			if got := takeTokens(t, "http://"+s.Addr(), "k", 1); got <= lease.Token(floor) {
				t.Errorf("after a restart k got token %d, below the floor %d", got, floor)
			}
		})
	}
}

// TestServeSharedDataDir: a --data-dir others may write to is refused,
// with the flag that allows it named; --allow-shared-data-dir serves it.
func TestServeSharedDataDir(t *testing.T) {
	cfg := serveConfig(t, io.Discard)
	if err := os.Mkdir(cfg.DataDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(cfg.DataDir, 0o777); err != nil { // whatever the umask
		t.Fatal(err)
	}
	r := cli(t, nil, nil, nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", cfg.DataDir)
	if r.code != ExitFailure {
		t.Fatalf("lease serve on a shared data dir: exit %d, want %d; stderr %q", r.code, ExitFailure, r.stderr)
	}
	errorLine(t, r, cfg.DataDir, "writable by other users", "--allow-shared-data-dir")
	cfg.AllowSharedDataDir = true
	startServe(t, cfg)
}

// TestServeStoreFlagsNeedTheStore: the embedded store's flags are usage
// errors with --backend, said before any engine is dialled.
func TestServeStoreFlagsNeedTheStore(t *testing.T) {
	for _, flag := range []string{"--accept-log-loss", "--allow-shared-data-dir"} {
		r := cli(t, nil, nil, nil, "serve", "--addr", "127.0.0.1:0", flag, "--backend", "redis://127.0.0.1:1")
		if r.code != ExitUsage {
			t.Errorf("%s with --backend: exit %d, want %d; stderr %q", flag, r.code, ExitUsage, r.stderr)
		}
		errorLine(t, r, flag, "embedded store only")
	}
}
