package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/memstore"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is the service's log, written by its goroutines and read by
// the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// start runs the service on a free loopback port and returns its base URL
// and log; it is shut down, and must exit cleanly, in cleanup.
func start(t *testing.T, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"-addr", "127.0.0.1:0"}, args...), logs, func(a net.Addr) { addrc <- a })
	}()
	var addr net.Addr
	select {
	case addr = <-addrc:
	case err := <-done:
		cancel()
		t.Fatalf("service exited before listening: %v\n%s", err, logs)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("service did not start listening within 30s")
	}
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service shutdown: %v", err)
		}
	})
	return "http://" + addr.String(), logs
}

type answer struct {
	status int
	token  string // the Fencing-Token response header
	body   string
}

func send(t *testing.T, c *http.Client, method, url, token string, body io.Reader) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set(fence.TokenHeader, token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header.Get(fence.TokenHeader), string(b)}
}

func errorCode(t *testing.T, a answer) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(a.body), &e); err != nil {
		t.Fatalf("error body %q: %v", a.body, err)
	}
	return e.Error.Code
}

func TestAcceptedAndStaleWrites(t *testing.T) {
	base, logs := start(t)
	c := http.DefaultClient
	url := base + "/reports/nightly"

	if a := send(t, c, "GET", url, "", nil); a.status != http.StatusNotFound || errorCode(t, a) != "not_found" {
		t.Errorf("GET before any write: %d %q, want 404 not_found", a.status, a.body)
	}
	if a := send(t, c, "PUT", url, "1", strings.NewReader(`{"rows":1}`)); a.status != http.StatusOK || a.body != `{"bytes":10,"key":"reports/nightly","token":1}`+"\n" {
		t.Fatalf("PUT with token 1: %d %q", a.status, a.body)
	}
	if a := send(t, c, "PUT", url, "2", strings.NewReader(`{"rows":2}`)); a.status != http.StatusOK {
		t.Fatalf("PUT with token 2: %d %q", a.status, a.body)
	}
	a := send(t, c, "PUT", url, "1", strings.NewReader(`{"rows":"late"}`))
	if a.status != http.StatusConflict || errorCode(t, a) != "stale_token" {
		t.Errorf("late PUT with token 1: %d %q, want 409 stale_token", a.status, a.body)
	}
	if a := send(t, c, "PUT", url, "", strings.NewReader(`{}`)); a.status != http.StatusBadRequest || errorCode(t, a) != "invalid" {
		t.Errorf("PUT without a token: %d %q, want 400 invalid", a.status, a.body)
	}
	// A failed write (body over the limit) does not record its token:
	// token 3 is still admitted after a failed 9.
	if a := send(t, c, "PUT", url, "9", bytes.NewReader(make([]byte, maxValue+1))); a.status != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized PUT: %d %q, want 413", a.status, a.body)
	}
	if a := send(t, c, "PUT", url, "3", strings.NewReader(`{"rows":3}`)); a.status != http.StatusOK {
		t.Errorf("PUT with token 3 after the failed 9: %d %q, want 200", a.status, a.body)
	}
	// Keys are fenced separately.
	if a := send(t, c, "PUT", base+"/reports/weekly", "1", strings.NewReader(`w`)); a.status != http.StatusOK {
		t.Errorf("PUT with token 1 on another key: %d %q, want 200", a.status, a.body)
	}

	got := send(t, c, "GET", url, "", nil)
	if got.status != http.StatusOK || got.body != `{"rows":3}` || got.token != "3" {
		t.Errorf("final GET: %d %q with token %q, want the write of token 3", got.status, got.body, got.token)
	}
	if !strings.Contains(logs.String(), "fencing_token=1 status=409") {
		t.Errorf("the log does not show the rejected late write:\n%s", logs)
	}
}

func TestStrictMode(t *testing.T) {
	base, _ := start(t, "-strict")
	url := base + "/job"
	if a := send(t, http.DefaultClient, "PUT", url, "4", strings.NewReader("a")); a.status != http.StatusOK {
		t.Fatalf("PUT with token 4: %d %q", a.status, a.body)
	}
	if a := send(t, http.DefaultClient, "PUT", url, "4", strings.NewReader("b")); a.status != http.StatusConflict {
		t.Errorf("second PUT with token 4 in strict mode: %d %q, want 409", a.status, a.body)
	}
}

// TestWorkerWithHold writes as a worker would from Go: through a transport
// stamping its lease's token, which stops sending once the lease is gone,
// while a late writer with an old token is rejected by the service.
func TestWorkerWithHold(t *testing.T) {
	ctx := context.Background()
	base, _ := start(t)
	url := base + "/reports/nightly"
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}

	// A worker whose lease expired while it was paused still sends token 1.
	old, err := store.Acquire(ctx, "nightly-report", "worker-a", 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	client, err := lease.NewClient(store, lease.WithOwner("worker-b"))
	if err != nil {
		t.Fatal(err)
	}
	acqCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	hold, err := client.Acquire(acqCtx, "nightly-report", time.Minute) // waits for worker-a's lease to expire
	if err != nil {
		t.Fatal(err)
	}
	tr, err := fence.NewHoldTransport(hold, nil)
	if err != nil {
		t.Fatal(err)
	}
	worker := &http.Client{Transport: tr}

	if a := send(t, worker, "PUT", url, "", strings.NewReader("written-by-b")); a.status != http.StatusOK {
		t.Fatalf("worker-b's write: %d %q", a.status, a.body)
	}
	if a := send(t, http.DefaultClient, "PUT", url, fence.FormatToken(old.Token), strings.NewReader("late-write-by-a")); a.status != http.StatusConflict {
		t.Errorf("worker-a's late write with token %d: %d %q, want 409", old.Token, a.status, a.body)
	}
	if err := hold.Release(ctx); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("PUT", url, strings.NewReader("after release"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Do(req); !errors.Is(err, lease.ErrReleased) {
		t.Errorf("write after release: %v, want it refused with ErrReleased", err)
	}
	got := send(t, http.DefaultClient, "GET", url, "", nil)
	if got.body != "written-by-b" || got.token != fence.FormatToken(hold.Token()) {
		t.Errorf("final state %q with token %s, want written-by-b with token %d", got.body, got.token, hold.Token())
	}
}
