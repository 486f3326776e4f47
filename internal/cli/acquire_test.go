package cli

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
)

// interruptAcquire runs lease acquire --wait 1h KEY against url, sends it
// SIGINT once arrived says its wait is at the server, and returns what it
// printed; it fails t if the command has not ended 20 s after the signal.
func interruptAcquire(t *testing.T, url string, arrived func() bool, args ...string) result {
	t.Helper()
	return interrupt(t, url, arrived, append([]string{"acquire", "--wait", "1h"}, args...)...)
}

// interrupt runs the command args against url, sends it SIGINT once
// arrived, and returns what it printed; it fails t if the command has not
// ended 20 s after the signal.
func interrupt(t *testing.T, url string, arrived func() bool, args ...string) result {
	t.Helper()
	sigs := make(chan os.Signal, 1)
	done := make(chan result, 1)
	go func() {
		done <- cliHTTP(t, map[string]string{EnvServer: url}, sigs, args...)
	}()
	poll.True(t, 10*time.Second, "the moment to interrupt it", arrived)
	sigs <- syscall.SIGINT
	select {
	case r := <-done:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("lease %s did not end within 20 s of SIGINT", args[0])
		return result{}
	}
}

// serverWaiters is how many waits the lease server at url has in line
// (GET /v1/stats).
func serverWaiters(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url + "/v1/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Waiters int `json:"waiters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Waiters
}

// TestAcquireInterruptedAgainstAHungServer: lease acquire --wait given
// SIGINT while its server takes the request and never answers ends within
// its --timeout, and says that the lease's fate is unknown, rather than
// wait for ever (or, as before, die at once without a word, leaving a
// lease granted as it died held by nobody until its TTL).
func TestAcquireInterruptedAgainstAHungServer(t *testing.T) {
	srv, arrived := hungServer(t) // never answers, whatever the client does
	start := time.Now()
	r := interruptAcquire(t, srv.URL, func() bool { return len(arrived) > 0 }, "--timeout", "300ms", "k")
	if r.code != ExitFailure {
		t.Errorf("exit %d, want %d", r.code, ExitFailure)
	}
	oneErrorLine(t, r, "interrupted", `"k"`, "fate is unknown", "--timeout 300ms")
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("ended %v after the start, want within about its --timeout of the signal", took)
	}
}

// TestRunInterruptedAgainstAHungServer: lease run --wait interrupted
// while its server never answers waits at most --timeout for the wait's
// end, and says that the lease's fate is unknown; it said only that it did
// not run CMD, and closing its Client cut the give-back short.
func TestRunInterruptedAgainstAHungServer(t *testing.T) {
	srv, arrived := hungServer(t)
	r := interrupt(t, srv.URL, func() bool { return len(arrived) > 0 }, "run", "--wait", "1h", "--timeout", "300ms", "k", "--", "true")
	if r.code != ExitTempFail {
		t.Errorf("exit %d, want %d", r.code, ExitTempFail)
	}
	if !strings.Contains(r.stderr, "not running true") || !strings.Contains(r.stderr, "fate is unknown") {
		t.Errorf("stderr %q: want the command not run and the lease's fate unknown", r.stderr)
	}
}

// TestAcquireInterruptedLeavesNothingHeld: against a server that answers,
// an interrupted lease acquire --wait tells it, waits for its word, says
// the wait was given up, and leaves nothing in line or held.
func TestAcquireInterruptedLeavesNothingHeld(t *testing.T) {
	store := memtest.New(t)
	api, err := leasehttp.NewServer(store, leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		api.Close()
		srv.Close()
	})
	holder, err := store.Acquire(context.Background(), "k", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waiters := func() int { return serverWaiters(t, srv.URL) }
	r := interruptAcquire(t, srv.URL, func() bool { return waiters() == 1 }, "--timeout", "5s", "k")
	if r.code != ExitFailure {
		t.Errorf("exit %d, want %d", r.code, ExitFailure)
	}
	oneErrorLine(t, r, "interrupted", `"k"`, "given up", "confirmed", "nothing is held")
	if strings.Contains(r.stderr, "unknown") {
		t.Errorf("stderr %q: the server answered, the outcome is known", r.stderr)
	}
	if n := waiters(); n != 0 {
		t.Errorf("%d waits in line after the interrupted acquire, want 0", n)
	}
	if got, err := store.Get(context.Background(), "k"); err != nil || got.Token != holder.Token {
		t.Errorf("Get = %+v, %v; want the holder's lease alone", got, err)
	}
}

// hungServer is a server that never answers: arrived is ready (it holds
// one value) once a request has reached it. Its requests are let go as the
// test ends.
func hungServer(t *testing.T) (srv *httptest.Server, arrived chan struct{}) {
	t.Helper()
	arrived = make(chan struct{}, 1)
	hung := make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-hung
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(hung) })
	return srv, arrived
}
