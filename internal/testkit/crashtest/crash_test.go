package crashtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	kills        = 22               // at least 20, per the issue
	workers      = 8                // concurrent clients
	keyCount     = 4                // few keys, so clients contend
	startBound   = 10 * time.Second // the server must be listening again within this
	requestLimit = 3 * time.Second
)

// ttls mixes leases that expire during a round with ones that outlive the
// server's death and must still be respected after the restart.
var ttls = []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}

// TestKill9 is the crash test of `lease serve` on its embedded store. The
// seed is printed; LEASE_CRASH_SEED=N replays the same kill moments and
// client choices (the interleaving of goroutines still varies).
func TestKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lease and kills it 22 times; skipped in -short")
	}
	seed := Seed(t)
	rng := rand.New(rand.NewPCG(seed, 1))

	bin := buildLease(t)
	dataDir := filepath.Join(t.TempDir(), "data")
	h := &History{}

	for round := range kills {
		srv := startServer(t, bin, dataDir)
		ctx, cancel := context.WithCancel(t.Context())
		tr := &http.Transport{MaxIdleConnsPerHost: workers}
		var wg sync.WaitGroup
		for w := range workers {
			c := &client{
				base:  srv.url,
				http:  &http.Client{Transport: tr, Timeout: requestLimit},
				owner: fmt.Sprintf("r%02d-w%d", round, w),
				rng:   rand.New(rand.NewPCG(seed, uint64(round*workers+w+2))),
				h:     h,
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				c.loop(ctx)
			}()
		}
		// Kill at a random moment: sometimes at once, mostly under load.
		time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
		srv.kill(t)
		cancel()
		wg.Wait()
		tr.CloseIdleConnections()
	}

	// The server comes back once more; every key must then be granted with
	// a token above all acknowledged ones, after its leases expired.
	srv := startServer(t, bin, dataDir)
	defer srv.stop(t)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &client{base: srv.url, http: &http.Client{Transport: tr, Timeout: requestLimit}, owner: "final", rng: rand.New(rand.NewPCG(seed, 0)), h: h}
	for k := range keyCount {
		key := KeyName(k)
		l, err := c.acquire(t.Context(), key, time.Second, 2*ttls[len(ttls)-1]+time.Second)
		if err != nil {
			t.Fatalf("after the last restart, acquiring %q: %v", key, err)
		}
		if err := c.release(t.Context(), key, l); err != nil {
			t.Errorf("after the last restart, releasing %q: %v", key, err)
		}
	}

	acqs := h.Snapshot()
	perKey := map[string]int{}
	for _, a := range acqs {
		perKey[a.Key]++
	}
	t.Logf("%d kills, %d acknowledged acquisitions %v, %d refused as held, %d renewals, %d releases, %d requests lost to a kill",
		kills, len(acqs), perKey, h.Held.Load(), h.Renewals.Load(), h.Releases.Load(), h.Unknown.Load())
	if len(acqs) < kills {
		t.Errorf("only %d acquisitions in %d rounds: the load did not reach the server", len(acqs), kills)
	}
	for _, v := range Check(acqs) {
		t.Error(v)
	}
}

// client drives the API with plain HTTP, so that it knows exactly which
// answers it got: nothing is retried behind its back.
type client struct {
	base  string
	http  *http.Client
	owner string
	rng   *rand.Rand
	h     *History
}

// wireLease is the API's lease.
type wireLease struct {
	Key       string `json:"key"`
	Owner     string `json:"owner"`
	Token     uint64 `json:"token"`
	ID        string `json:"id"`
	TTLMillis int64  `json:"ttl_ms"`
	ExpiresAt string `json:"expires_at"`
}

var errHeld = errors.New("held")

// loop acquires, maybe renews, and releases or abandons, until ctx ends.
func (c *client) loop(ctx context.Context) {
	for ctx.Err() == nil {
		key := KeyName(c.rng.IntN(keyCount))
		ttl := ttls[c.rng.IntN(len(ttls))]
		var wait time.Duration
		if c.rng.IntN(2) == 0 {
			wait = time.Duration(c.rng.IntN(200)) * time.Millisecond
		}
		a, err := c.acquire(ctx, key, ttl, wait)
		if err != nil {
			if !errors.Is(err, errHeld) {
				pause(ctx, 5*time.Millisecond) // the server is down or dying
			}
			continue
		}
		for range c.rng.IntN(3) {
			pause(ctx, ttl/4)
			if c.renew(ctx, key, a, ttl) != nil {
				break
			}
		}
		if c.rng.IntN(5) != 0 {
			_ = c.release(ctx, key, a)
		} // else abandon it: it must expire, on the server's clock, even across a kill
	}
}

func (c *client) acquire(ctx context.Context, key string, ttl, wait time.Duration) (*Acquisition, error) {
	sent := c.h.Clock.Add(1)
	var l wireLease
	err := c.post(ctx, key, "acquire", map[string]any{"owner": c.owner, "ttl_ms": ttl.Milliseconds(), "wait_ms": wait.Milliseconds()}, &l)
	if err != nil {
		return nil, err
	}
	acked := c.h.Clock.Add(1)
	exp, perr := time.Parse(time.RFC3339Nano, l.ExpiresAt)
	if perr != nil || l.Key != key || l.Token == 0 || l.ID == "" || l.TTLMillis != ttl.Milliseconds() {
		return nil, fmt.Errorf("acquire %q: malformed answer %+v (%v)", key, l, perr)
	}
	a := &Acquisition{Key: key, Owner: c.owner, Token: l.Token, TTL: ttl, Expires: exp, HeldUntil: exp, Sent: sent, Acked: acked}
	c.h.Add(a)
	idOf.Store(a, l.ID)
	return a, nil
}

// idOf keeps each acquisition's secret id out of the checked record.
var idOf sync.Map

func (c *client) renew(ctx context.Context, key string, a *Acquisition, ttl time.Duration) error {
	id, _ := idOf.Load(a)
	var l wireLease
	err := c.post(ctx, key, "renew", map[string]any{"id": id, "token": a.Token, "ttl_ms": ttl.Milliseconds()}, &l)
	if err != nil {
		return err
	}
	exp, perr := time.Parse(time.RFC3339Nano, l.ExpiresAt)
	if perr != nil || l.Token != a.Token {
		return fmt.Errorf("renew %q: malformed answer %+v (%v)", key, l, perr)
	}
	c.h.Renewals.Add(1)
	c.h.Update(func() {
		if exp.After(a.HeldUntil) {
			a.HeldUntil = exp
		}
	})
	return nil
}

func (c *client) release(ctx context.Context, key string, a *Acquisition) error {
	id, _ := idOf.Load(a)
	c.h.Update(func() { a.ReleaseTried = true }) // before sending: its effect may precede any answer
	err := c.post(ctx, key, "release", map[string]any{"id": id, "token": a.Token}, nil)
	if err == nil {
		c.h.Releases.Add(1)
	}
	return err
}

// post sends one API call. An answer other than 200 or 409 fails the
// request; a transport error means the outcome is unknown.
func (c *client) post(ctx context.Context, key, op string, body any, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v1/leases/"+url.PathEscape(key)+"/"+op, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		c.h.Unknown.Add(1)
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		c.h.Unknown.Add(1)
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if out == nil {
			return nil
		}
		return json.Unmarshal(raw, out)
	case http.StatusConflict:
		c.h.Held.Add(1)
		return fmt.Errorf("%s %q: %w: %s", op, key, errHeld, raw)
	}
	return fmt.Errorf("%s %q: status %d: %s", op, key, resp.StatusCode, raw)
}

// buildLease builds cmd/lease into a temporary directory.
func buildLease(t *testing.T) string { t.Helper(); return BuildLease(t) }

// server is one `lease serve` child process, killed when the test ends.
type server struct {
	*Serve
	url string
}

func startServer(t *testing.T, bin, dataDir string, flags ...string) *server {
	t.Helper()
	s, err := StartServe(bin, dataDir, startBound, flags...)
	if errors.Is(err, ErrExited) {
		t.Fatalf("lease serve exited before it was ready:\n%s", s.Log())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return &server{Serve: s, url: s.URL}
}

// kill sends SIGKILL and waits for the process to be gone.
func (s *server) kill(*testing.T) { s.Kill() }

// stop asks for a graceful shutdown and checks the server ends by itself.
func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.Stop(15 * time.Second); err != nil {
		t.Error(err)
	}
}

func (s *server) logText() string { return s.Log() }
