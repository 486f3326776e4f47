package cli

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

// TestServerURLWithoutScheme: host:port without http:// is the commonest
// slip in a server address. From --server or from $LEASE_SERVER, every
// client command (lease run included) answers with the same usage error,
// which shows the URL it wants, and dials nothing.
func TestServerURLWithoutScheme(t *testing.T) {
	childEnviron(t, "env", "", 0)
	for _, addr := range []string{"127.0.0.1:7420", "localhost:7420", "leases.internal"} {
		for _, args := range [][]string{{"get", "job"}, {"list"}, runArgs(t, "job")} {
			var msgs []string
			for _, via := range []struct {
				env  map[string]string
				args []string
				name string
			}{
				{nil, []string{"--server", addr}, "--server"},
				{map[string]string{EnvServer: addr}, nil, "$" + EnvServer},
			} {
				// The flag goes before --, where lease run's CMD begins.
				full := append(append(append([]string{}, args[0]), via.args...), args[1:]...)
				r := cliHTTP(t, via.env, nil, full...)
				if r.code != ExitUsage || r.stdout != "" {
					t.Errorf("%v with %s: exit %d stdout %q, want %d and nothing (stderr %q)", args[0], via.name, r.code, r.stdout, ExitUsage, r.stderr)
				}
				oneErrorLine(t, r, via.name, "http://"+addr)
				msgs = append(msgs, strings.Replace(r.stderr, via.name, "FROM", 1))
			}
			if msgs[0] != msgs[1] {
				t.Errorf("%v: --server says %q, $%s says %q", args[0], msgs[0], EnvServer, msgs[1])
			}
		}
	}
	// A scheme other than http or https is named as such.
	r := cli(t, memtest.New(t), nil, nil, "get", "job", "--server", "ftp://h:21")
	if r.code != ExitUsage || r.url != "" {
		t.Errorf("ftp://: exit %d, dialled %q", r.code, r.url)
	}
	oneErrorLine(t, r, `"ftp"`)
	// The scheme is case-insensitive, as in any URL.
	r = cli(t, memtest.New(t), nil, nil, "get", "job", "--server", "HTTP://h:1")
	if r.url != "HTTP://h:1" {
		t.Errorf("HTTP://h:1: exit %d, dialled %q (stderr %q)", r.code, r.url, r.stderr)
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
	api, err := leasehttp.NewServer(memtest.New(t), leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
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

// TestServerListFailsOver: --server and $LEASE_SERVER take several replicas'
// URLs, comma-separated; with the first one down, every client command
// reaches the next. The list reaches the client whole (not just its first
// URL), and a slip in any entry is a usage error naming it.
func TestServerListFailsOver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String()
	ln.Close()
	live, _ := apiServer(t)
	servers := dead + "," + live.URL
	for _, via := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"--server", nil, []string{"--server", servers}},
		{"$" + EnvServer, map[string]string{EnvServer: servers}, nil},
	} {
		r := cliHTTP(t, via.env, nil, append([]string{"acquire", "multi/" + via.name[1:], "--ttl", "1m", "-o", "json"}, via.args...)...)
		if r.code != ExitOK {
			t.Fatalf("acquire with %s %q: exit %d, stderr %q", via.name, servers, r.code, r.stderr)
		}
		r = cliHTTP(t, via.env, nil, append([]string{"get", "multi/" + via.name[1:]}, via.args...)...)
		if r.code != ExitOK {
			t.Fatalf("get with %s %q: exit %d, stderr %q", via.name, servers, r.code, r.stderr)
		}
	}
	r := cli(t, memtest.New(t), nil, nil, "get", "job", "--server", "http://a:1, http://b:2")
	if r.url != "http://a:1, http://b:2" {
		t.Errorf("a list: dialled %q (stderr %q); want the whole list passed on", r.url, r.stderr)
	}
	for _, bad := range []struct{ list, want string }{
		{"http://a:1,b:2", "http://b:2"},
		{"http://a:1,,http://b:2", "empty entry"},
		{"http://a:1,", "empty entry"},
		{"http://a:1,ftp://b", `"ftp"`},
	} {
		r := cli(t, memtest.New(t), map[string]string{EnvServer: bad.list}, nil, "get", "job")
		if r.code != ExitUsage || r.url != "" {
			t.Errorf("$%s=%q: exit %d, dialled %q; want a usage error", EnvServer, bad.list, r.code, r.url)
		}
		oneErrorLine(t, r, "$"+EnvServer, bad.want)
	}
}

// TestLongWaitAndTimeoutDoNotOverflow: --timeout counts on top of --wait, and
// two long ones (a wait meant as "for ever") add up to at most the longest
// duration. They used to add up past it to a negative timeout: acquire
// failed at once with "context deadline exceeded" (exit 1) on a free key,
// and run exited 75 without trying.
func TestLongWaitAndTimeoutDoNotOverflow(t *testing.T) {
	longest := time.Duration(math.MaxInt64).String()
	env := map[string]string{EnvServer: apiServerOver(t, memtest.New(t)).URL}
	for i, flags := range [][]string{
		{"--wait", longest},
		{"--wait", "2000000h", "--timeout", "2000000h"},
	} {
		key := fmt.Sprintf("job%d", i)
		r := cliHTTP(t, env, nil, append([]string{"acquire", key}, flags...)...)
		if r.code != ExitOK || !strings.HasPrefix(r.stdout, "key="+key+" ") {
			t.Errorf("acquire %s %v: exit %d, stdout %q, stderr %q; want the free key acquired", key, flags, r.code, r.stdout, r.stderr)
		}
	}
	childEnviron(t, "env", "", 0)
	r := cliHTTP(t, env, nil, runArgs(t, "run-job", "--wait", "2000000h", "--timeout", "2000000h")...)
	if r.code != ExitOK || !strings.HasPrefix(r.stdout, "key=run-job ") {
		t.Errorf("run --wait 2000000h --timeout 2000000h: exit %d, stdout %q, stderr %q; want the command run under the free key", r.code, r.stdout, r.stderr)
	}
}

// TestWaitOnAnUnreachableServerIsNotHeld: a --wait that runs out while the
// server refuses every connection ends as an unreachable server does, exit
// 1 (run: 75) with the failure named, not as a key held by someone: acquire
// used to exit 3, "held by another owner: "k" was held until the wait
// ended", when no server had been reached at all, and run --slots said all
// the slots stayed held.
func TestWaitOnAnUnreachableServerIsNotHeld(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{EnvServer: "http://" + ln.Addr().String()}
	if err := ln.Close(); err != nil { // connections to it are refused now
		t.Fatal(err)
	}
	r := cliHTTP(t, env, nil, "acquire", "k", "--wait", "100ms")
	if r.code != ExitFailure {
		t.Errorf("acquire --wait 100ms: exit %d, stderr %q; want %d, the server unreachable", r.code, r.stderr, ExitFailure)
	}
	oneErrorLine(t, r, "refused")
	childEnviron(t, "env", "", 0)
	for _, flags := range [][]string{{"--wait", "100ms"}, {"--wait", "100ms", "--slots", "2"}} {
		r = cliHTTP(t, env, nil, runArgs(t, append([]string{"k"}, flags...)...)...)
		if r.code != ExitTempFail {
			t.Errorf("run %v: exit %d, stderr %q; want %d", flags, r.code, r.stderr, ExitTempFail)
		}
		oneErrorLine(t, r, "refused")
		if strings.Contains(r.stderr, "held") {
			t.Errorf("run %v says the key was held, though no server was reached: %q", flags, r.stderr)
		}
	}
}
