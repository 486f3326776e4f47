package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/memstore"
)

// bareHeld answers a held key with the bare sentinel, as pgstore does when a
// concurrent acquire wins the race and etcdstore does while waiters queue:
// the holder is not known.
type bareHeld struct{ lease.Backend }

func (b bareHeld) Acquire(ctx context.Context, key, owner string, ttl time.Duration) (lease.Lease, error) {
	l, err := b.Backend.Acquire(ctx, key, owner, ttl)
	if errors.Is(err, lease.ErrHeld) {
		return lease.Lease{}, fmt.Errorf("store: %q was just taken by a concurrent acquire: %w", key, lease.ErrHeld)
	}
	return l, err
}

// TestAcquireHeldWithoutHolder: a server that says "held" without naming
// the holder must not make acquire print an empty owner and token 0, which
// reads as "held by nobody, token none".
func TestAcquireHeldWithoutHolder(t *testing.T) {
	store := memstore.New()
	if _, err := store.Acquire(t.Context(), "job", "worker-7", time.Minute); err != nil {
		t.Fatal(err)
	}
	srv := apiServerOver(t, bareHeld{store})
	r := cli(t, httpClient(t, srv.URL), nil, nil, "acquire", "job", "--owner", "me")
	if r.code != ExitHeld || r.stdout != "" {
		t.Fatalf("exit %d stdout %q, want %d and nothing", r.code, r.stdout, ExitHeld)
	}
	oneErrorLine(t, r, `"job"`, "held")
	if strings.Contains(r.stderr, `""`) || strings.Contains(r.stderr, "token 0") {
		t.Errorf("stderr %q names an empty holder", r.stderr)
	}
}

// TestTimeoutFlagBoundsTheWait: --timeout is how long the command waits for
// the server (SERVE.md: "--timeout (default 30 s) bounds the wait for the
// server"), so a server answering after 11 s (behind a slow link or proxy)
// is waited for under the default, and given up on at --timeout when that
// is shorter.
func TestTimeoutFlagBoundsTheWait(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: waits 11s for a slow server")
	}
	t.Parallel()
	const delay = 11 * time.Second
	api, err := leasehttp.NewServer(memstore.New(), leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		_ = api.Close()
		srv.Close()
	})
	run := func(args ...string) result {
		var out, errb bytes.Buffer
		a := &app{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, dial: dialHTTP,
			getenv: func(k string) string {
				if k == EnvServer {
					return srv.URL
				}
				return ""
			}}
		code := execute(newRoot(a), args, &errb)
		return result{code: code, stdout: out.String(), stderr: errb.String()}
	}

	start := time.Now()
	r := run("acquire", "short", "--timeout", "1s")
	if r.code == ExitOK || time.Since(start) > 5*time.Second {
		t.Errorf("--timeout 1s: exit %d after %v (stderr %q); want a failure after about 1s", r.code, time.Since(start), r.stderr)
	}

	r = run("acquire", "slow", "--ttl", "1m", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("default --timeout 30s, server answering after %v: exit %d, stderr %q", delay, r.code, r.stderr)
	}
}

// TestRedactHidesEveryPassword: a password can sit in a URL's query
// (postgres://u@db/x?password=…, which pgx reads), in a keyword/value
// connection string, or in an etcd:// URL's userinfo; none of them may reach
// the serve log's backend= field or an error message.
func TestRedactHidesEveryPassword(t *testing.T) {
	// redact itself: TestRedact's table.
	for _, spec := range []string{
		"host=db user=u password=secret dbname=x",
		"etcd://u:secret@h1:2379",
		"etcd://h1:2379,u:secret@h2",
	} {
		cfg := serveConfig(t, io.Discard)
		cfg.DataDir, cfg.Backend = "", spec
		s, err := NewServer(cfg)
		if err == nil {
			err = s.Run(t.Context())
			if err == nil {
				_ = s.Close()
				t.Fatalf("%q: the server started", spec)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("--backend %q: error %q shows the password", spec, err)
		}
	}
}

// TestEtcdSpecPortIsANumber: a typo in an etcd endpoint's port is a usage
// error at once, not a 30 s wait for a connection that cannot be made.
func TestEtcdSpecPortIsANumber(t *testing.T) {
	for _, spec := range []string{"etcd://h:abc", "etcd://h1:2379,h2:0", "etcd://h:70000/p"} {
		if eps, prefix, err := parseEtcdSpec(spec); err == nil {
			t.Errorf("%q: parsed as %v %q", spec, eps, prefix)
		}
	}
}
