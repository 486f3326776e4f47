package leasehttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/leasehttp"
)

// batchBody is a POST /v1/renew body renewing ls to ttl.
func batchBody(ttl time.Duration, ls ...lease.Lease) string {
	var items []string
	for _, l := range ls {
		items = append(items, fmt.Sprintf(`{"key":%q,"id":%q,"token":%d,"ttl_ms":%d}`, l.Key, l.ID.Reveal(), l.Token, ttl.Milliseconds()))
	}
	return `{"renewals":[` + strings.Join(items, ",") + `]}`
}

// TestRenewBatchRefusedWhole: a batch with a key outside the credential's
// prefixes, or a malformed renewal anywhere in it, is refused before any
// renewal is made: the others keep their TTL.
func TestRenewBatchRefusedWhole(t *testing.T) {
	const all, jobs = "tok-all-0123456789", "tok-jobs-0123456789"
	_, hs := startServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: all, Prefixes: []string{"*"}},
		{Token: jobs, Prefixes: []string{"jobs/"}},
	}))
	admin := newClient(t, hs.URL, leasehttp.WithAuthToken(all))
	const ttl = time.Minute
	mine, err := admin.Acquire(ctxFor(t), "jobs/a", "o", ttl)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := admin.Acquire(ctxFor(t), "other/b", "o", ttl)
	if err != nil {
		t.Fatal(err)
	}
	good := strings.TrimSuffix(strings.TrimPrefix(batchBody(time.Hour, mine), `{"renewals":[`), `]}`)
	many := strings.TrimSuffix(strings.Repeat(good+",", lease.MaxRenewBatch+1), ",")
	for _, tc := range []struct {
		name, body string
		status     int
		code, says string
	}{
		{"uncovered key", batchBody(time.Hour, mine, theirs), 403, "forbidden", "other/b"},
		{"bad id in element 1", `{"renewals":[` + good + `,{"key":"jobs/a","id":"xyz","token":1,"ttl_ms":60000}]}`, 400, "invalid", "element 1"},
		{"missing token", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","ttl_ms":60000}]}`, 400, "invalid", `field \"token\" of element 1`},
		{"unknown member", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":60000,"x":1}]}`, 400, "invalid", `unknown field \"x\"`},
		{"ttl too short", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":1}]}`, 400, "invalid", "ttl_ms"},
		{"element not an object", `{"renewals":[` + good + `,1]}`, 400, "invalid", "array of objects"},
		{"not an array", `{"renewals":{}}`, 400, "invalid", "must be an array"},
		{"empty", `{"renewals":[]}`, 400, "invalid", "empty"},
		{"too many", `{"renewals":[` + many + `]}`, 400, "invalid", "more than 256"},
		{"unclosed", `{"renewals":[` + good, 400, "invalid", "ends inside"},
		{"key twice", `{"renewals":[` + good + `,{"key":"jobs/a","key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", `field \"key\" appears more than once`},
		{"id twice", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", `field \"id\" appears more than once`},
		{"token twice", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":1,"token":1,"ttl_ms":60000}]}`, 400, "invalid", `field \"token\" appears more than once`},
		{"renewals twice", `{"renewals":[` + good + `],"renewals":[` + good + `]}`, 400, "invalid", `field \"renewals\" appears more than once`},
		{"token 2^64", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":18446744073709551616,"ttl_ms":60000}]}`, 400, "invalid", `field \"token\" is too large`},
		{"token above 2^53", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":9007199254740993,"ttl_ms":60000}]}`, 400, "invalid", "element 1"},
		{"ttl 2^64-1", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":18446744073709551615}]}`, 400, "invalid", "ttl_ms"},
		{"token exponent", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `","token":1e0,"ttl_ms":60000}]}`, 400, "invalid", "without fraction or exponent"},
		{"id escaped, not hex", `{"renewals":[` + good + `,{"key":"jobs/a","id":"\u007a` + mine.ID.Reveal()[1:] + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", "not hex"},
		{"id of 33 digits", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + mine.ID.Reveal() + `0","token":1,"ttl_ms":60000}]}`, 400, "invalid", "32 hex digits, got 33"},
		{"id zero", `{"renewals":[` + good + `,{"key":"jobs/a","id":"` + strings.Repeat("0", 32) + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", "zero"},
		{"key lone surrogate", `{"renewals":[` + good + `,{"key":"jobs/\ud800","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", "surrogate"},
		{"key not UTF-8", `{"renewals":[` + good + `,{"key":"jobs/` + "\xff" + `","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", "UTF-8"},
		{"key control character", `{"renewals":[` + good + `,{"key":"jobs/\u0001","id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", "control character"},
		{"key null", `{"renewals":[` + good + `,{"key":null,"id":"` + mine.ID.Reveal() + `","token":1,"ttl_ms":60000}]}`, 400, "invalid", "must be a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := call(t, "POST", hs.URL+"/v1/renew", jobs, tc.body)
			if status != tc.status || !strings.Contains(body, `"code":"`+tc.code+`"`) || !strings.Contains(body, tc.says) {
				t.Fatalf("POST /v1/renew: %d %s; want %d %s saying %s", status, body, tc.status, tc.code, tc.says)
			}
			for _, l := range []lease.Lease{mine, theirs} {
				if g, err := admin.Get(ctxFor(t), l.Key); err != nil || g.TTL != ttl {
					t.Errorf("a refused batch renewed %s: %+v, %v", l.Key, g, err)
				}
			}
		})
	}
	// The same credential renews what it covers, and each refusal is the
	// renewal's own.
	if err := admin.Release(ctxFor(t), theirs); err != nil {
		t.Fatal(err)
	}
	gone := mine
	gone.Token++
	status, body := call(t, "POST", hs.URL+"/v1/renew", jobs, batchBody(time.Hour, mine, gone))
	if status != 200 || !strings.Contains(body, `"results":[{"lease":{"key":"jobs/a"`) || !strings.Contains(body, `{"error":{"code":"not_held"`) {
		t.Fatalf("POST /v1/renew of a held and a stale lease: %d %s", status, body)
	}
	if g, err := admin.Get(ctxFor(t), mine.Key); err != nil || g.TTL != time.Hour {
		t.Errorf("jobs/a after its renewal: %+v, %v; want TTL 1h", g, err)
	}
}

// TestRenewBatchOfLongestKeys: the largest batch ValidateRenewals allows,
// of keys near the longest with every byte escaped in JSON, fits the body
// limit of POST /v1/renew.
func TestRenewBatchOfLongestKeys(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	c := newClient(t, hs.URL)
	renewals := make([]lease.Renewal, lease.MaxRenewBatch)
	for i := range renewals {
		k := fmt.Sprintf("%03d", i) + strings.Repeat("<", lease.MaxKeyLen-3) // "<" travels as \u003c
		l, err := c.Acquire(ctxFor(t), k, "o", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		renewals[i] = lease.Renewal{Lease: l, TTL: time.Hour}
	}
	res, err := c.RenewBatch(ctxFor(t), renewals)
	if err != nil {
		t.Fatalf("RenewBatch of %d leases with %d-byte keys: %v", len(renewals), lease.MaxKeyLen, err)
	}
	for i, r := range res {
		if r.Err != nil || r.Lease.TTL != time.Hour {
			t.Fatalf("renewal %d: %+v, %v", i, r.Lease, r.Err)
		}
	}
}

// TestRenewBatchReadsAnyJSONSpelling: a renewal reads the same however
// its JSON is spelled — escaped keys and IDs, upper-case hex, unicode as
// itself or escaped, members in any order, whitespace — and the answer
// carries each key as the client's decoder reads it back.
func TestRenewBatchReadsAnyJSONSpelling(t *testing.T) {
	_, hs := startServer(t, newMem(t))
	c := newClient(t, hs.URL)
	var held []lease.Lease
	for _, k := range []string{"jobs/ü", "jobs/日本", "a<b&c>", `q"\`} {
		l, err := c.Acquire(ctxFor(t), k, "o", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	id := func(l lease.Lease) string { return l.ID.Reveal() }
	body := `{ "renewals" : [
		{"ttl_ms":3600000, "token":` + fmt.Sprint(held[0].Token) + `, "id":"` + strings.ToUpper(id(held[0])) + `", "key":"jobs\/\u00fc"},
		{"key":"jobs/日本","id":"\u00` + fmt.Sprintf("%x", id(held[1])[0]) + id(held[1])[1:] + `","token":` + fmt.Sprint(held[1].Token) + `,"ttl_ms":3600000},
		{"key":"a\u003cb\u0026c\u003e","id":"` + id(held[2]) + `","token":` + fmt.Sprint(held[2].Token) + `,"ttl_ms":3600000},
		{"key":"q\"\\","id":"` + id(held[3]) + `","token":` + fmt.Sprint(held[3].Token) + `,"ttl_ms":3600000}
	] }`
	status, answer := call(t, "POST", hs.URL+"/v1/renew", "", body)
	if status != 200 || !strings.HasSuffix(answer, "]}\n") || strings.Count(answer, "\n") != 1 {
		t.Fatalf("POST /v1/renew: %d %q; want 200 and one line of JSON", status, answer)
	}
	var got struct {
		Results []struct {
			Lease *leasehttp.LeaseJSON `json:"lease"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(answer), &got); err != nil || len(got.Results) != len(held) {
		t.Fatalf("answer %s: %v", answer, err)
	}
	for i, l := range held {
		r := got.Results[i].Lease
		if r == nil || r.Key != l.Key || r.Token != l.Token || r.ID != l.ID.Reveal() || r.TTLMillis != time.Hour.Milliseconds() {
			t.Errorf("result %d: %+v, want %s renewed for an hour", i, r, l.Key)
		}
		if g, err := c.Get(ctxFor(t), l.Key); err != nil || g.TTL != time.Hour {
			t.Errorf("%s after the batch: %+v, %v; want TTL 1h", l.Key, g, err)
		}
	}
	// The client's own request and reading of the answer, for the same keys.
	renewals := make([]lease.Renewal, len(held))
	for i, l := range held {
		renewals[i] = lease.Renewal{Lease: l, TTL: 2 * time.Hour}
	}
	res, err := c.RenewBatch(ctxFor(t), renewals)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if l := held[i]; r.Err != nil || r.Lease.Key != l.Key || r.Lease.Token != l.Token || r.Lease.ID != l.ID || r.Lease.Owner != "o" || r.Lease.TTL != 2*time.Hour {
			t.Errorf("RenewBatch result %d: %+v, %v; want %s renewed for 2h", i, r.Lease, r.Err, l.Key)
		}
	}
}

// TestClientRenewsManyHoldsInFewRequests: one lease.Client holding 1,000
// leases at TTL 3 s through a server over boltstore (lease serve's default)
// keeps them all for 9 s with at most 200 renew requests, where one request
// per lease and third of a TTL made about 9,000. The acquisitions are spread
// over a whole renewal interval, the hardest start for coalescing.
//
// It runs in a synctest bubble, the client talking to the server through
// handlerTransport, so that the 9 s are the bubble's and the real disk's
// commits take none of them. Over real TCP on the real clock, under the
// race detector on a shared 2-core machine, the 1,000 acquisitions took 6-9
// s, and once, while other tests shared the machine, about 40 s, in which
// 938 holds were lost: their renewals were answered past their deadlines,
// as I5 says they must then be. That is how much work the machine could do,
// not how many requests the Client makes, which is what this test is about.
func TestClientRenewsManyHoldsInFewRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("1,000 holds through boltstore: seconds of work under the race detector")
	}
	synctest.Test(t, func(t *testing.T) {
		store, err := boltstore.Open(filepath.Join(t.TempDir(), "lease.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		srv := newServer(t, store)
		var renews atomic.Int64
		counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v1/renew" || strings.HasSuffix(r.URL.Path, "/renew") {
				renews.Add(1)
			}
			srv.ServeHTTP(w, r)
		})
		hc := newClient(t, "http://127.0.0.1", leasehttp.WithHTTPClient(&http.Client{Transport: handlerTransport{counting}}))
		c, err := lease.NewClient(hc, lease.WithOwner("worker"))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const ttl, workers = 3 * time.Second, 16
		holds := make([]*lease.Hold, 1000)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := w; i < len(holds); i += workers {
					// One acquisition every millisecond: the holds' send
					// times cover a renewal interval (TTL/3).
					time.Sleep(ttl / 3 / time.Duration(len(holds)/workers))
					h, err := c.TryAcquire(ctx, fmt.Sprintf("shard/%04d", i), ttl)
					if err != nil {
						t.Error(err)
						return
					}
					holds[i] = h
				}
			})
		}
		wg.Wait()
		defer func() {
			for _, h := range holds {
				if h != nil {
					_ = h.Release(ctx)
				}
			}
		}()
		if t.Failed() {
			return
		}
		before := renews.Load()
		time.Sleep(9 * time.Second)
		n := renews.Load() - before
		lost := 0
		for _, h := range holds {
			if h.Err() != nil {
				lost++
			}
		}
		t.Logf("%d renew requests in 9 s for 1,000 holds, %d lost", n, lost)
		if lost != 0 {
			t.Errorf("%d holds lost", lost)
		}
		if n == 0 || n > 200 {
			t.Errorf("%d renew requests in 9 s, want 1 to 200", n)
		}
	})
}

// TestNarrowedCredentialLosesOnlyItsHolds: a credential narrowed under a
// Client's holds (the SIGHUP reload of --auth-tokens-file) makes the server
// refuse whole (403) every POST /v1/renew with a key it no longer covers;
// the holds renewed in the same batches as that key stay held, and only the
// uncovered key's hold is lost.
func TestNarrowedCredentialLosesOnlyItsHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const token = "tok-worker-0123456789"
		srv := newServer(t, newMem(t), leasehttp.WithCredentials([]leasehttp.Credential{
			{Token: token, Prefixes: []string{"jobs/", "other/"}},
		}))
		var refused atomic.Int64
		counting := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec := &statusRecorder{ResponseWriter: w}
			srv.ServeHTTP(rec, r)
			if r.URL.Path == "/v1/renew" && rec.status == http.StatusForbidden {
				refused.Add(1)
			}
		})
		hc := newClient(t, "http://127.0.0.1", leasehttp.WithAuthToken(token),
			leasehttp.WithHTTPClient(&http.Client{Transport: handlerTransport{counting}}))
		c, err := lease.NewClient(hc, lease.WithOwner("worker"))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		const ttl = 3 * time.Second
		var holds []*lease.Hold
		for _, key := range []string{"jobs/a", "jobs/b", "other/c", "jobs/d"} {
			h, err := c.TryAcquire(ctx, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Release(ctx)
			holds = append(holds, h)
		}
		if err := srv.SetCredentials([]leasehttp.Credential{{Token: token, Prefixes: []string{"jobs/"}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * ttl)
		synctest.Wait()
		for _, h := range holds {
			err := h.Err()
			if h.Key() == "other/c" {
				if !errors.Is(err, lease.ErrLost) {
					t.Errorf("the uncovered key's hold: Err = %v, want ErrLost", err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s, still covered, lost with the uncovered key: %v", h.Key(), err)
			}
		}
		if refused.Load() == 0 {
			t.Error("no renew batch was refused 403: the test tried nothing")
		}
	})
}

// statusRecorder notes the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

// TestRenewBatchMinimalAnswer: asked with Prefer: return=minimal, POST
// /v1/renew answers each renewed lease with its TTL and expiry only, and
// says so in Preference-Applied; asked without it, in full. The Go client
// asks for it and reads either, so it works as well with a server from
// before the minimal answer, which ignores the header.
func TestRenewBatchMinimalAnswer(t *testing.T) {
	srv := newServer(t, newMem(t))
	var prefer atomic.Value // what the client sent
	old := atomic.Bool{}    // the server ignores Prefer
	hs := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/renew" {
			prefer.Store(r.Header.Values("Prefer"))
			if old.Load() {
				r.Header.Del("Prefer")
			}
		}
		srv.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	c := newClient(t, hs.URL)
	var held []lease.Lease
	for _, k := range []string{"a", "b", "c"} {
		l, err := c.Acquire(ctxFor(t), k, "owner-"+k, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, l)
	}
	if err := c.Release(ctxFor(t), held[1]); err != nil {
		t.Fatal(err)
	}
	body := batchBody(time.Hour, held...)
	post := func(prefer ...string) (http.Header, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctxFor(t), "POST", hs.URL+"/v1/renew", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		for _, p := range prefer {
			req.Header.Add("Prefer", p)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		if _, err := io.Copy(&b, resp.Body); err != nil || resp.StatusCode != 200 {
			t.Fatalf("POST /v1/renew with Prefer %q: %d %q (%v)", prefer, resp.StatusCode, b.String(), err)
		}
		return resp.Header, b.String()
	}
	type result struct {
		Lease     *leasehttp.LeaseJSON   `json:"lease"`
		Error     *struct{ Code string } `json:"error"`
		TTLMillis *int64                 `json:"ttl_ms"`
		ExpiresAt *string                `json:"expires_at"`
	}
	read := func(answer string) []result {
		t.Helper()
		var got struct{ Results []result }
		if err := json.Unmarshal([]byte(answer), &got); err != nil || len(got.Results) != len(held) {
			t.Fatalf("answer %s: %v", answer, err)
		}
		return got.Results
	}
	for _, p := range [][]string{{"return=minimal"}, {"RETURN=Minimal"}, {`return="minimal"`}, {"respond-async, return=minimal; x=1"}, {"wait=5", "return=minimal"}} {
		h, answer := post(p...)
		if got := h.Get("Preference-Applied"); got != "return=minimal" {
			t.Errorf("Prefer %q: Preference-Applied %q, want return=minimal", p, got)
		}
		rs := read(answer)
		for i, r := range rs {
			switch {
			case i == 1 && (r.Error == nil || r.Error.Code != "not_held" || r.Lease != nil || r.TTLMillis != nil):
				t.Errorf("Prefer %q: result %d %+v, want only not_held", p, i, r)
			case i != 1 && (r.Lease != nil || r.Error != nil || r.TTLMillis == nil || *r.TTLMillis != time.Hour.Milliseconds() || r.ExpiresAt == nil):
				t.Errorf("Prefer %q: result %d %+v, want only ttl_ms 3600000 and expires_at", p, i, r)
			}
		}
	}
	for _, p := range [][]string{nil, {"return=representation"}, {"return=representation, return=minimal"}, {"x=\"return=minimal\""}, {"returns=minimal"}} {
		h, answer := post(p...)
		if got := h.Values("Preference-Applied"); len(got) != 0 {
			t.Errorf("Prefer %q: Preference-Applied %q, want none", p, got)
		}
		for i, r := range read(answer) {
			if i != 1 && (r.Lease == nil || r.Lease.Key != held[i].Key || r.Lease.Owner != held[i].Owner || r.TTLMillis != nil) {
				t.Errorf("Prefer %q: result %d %+v, want the whole lease", p, i, r)
			}
		}
	}

	// The client asks for the minimal answer, and makes the same results
	// of either.
	for _, ignored := range []bool{false, true} {
		old.Store(ignored)
		renewals := []lease.Renewal{{Lease: held[0], TTL: 2 * time.Hour}, {Lease: held[1], TTL: time.Hour}, {Lease: held[2], TTL: 3 * time.Hour}}
		before := time.Now()
		res, err := c.RenewBatch(ctxFor(t), renewals)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := prefer.Load().([]string); len(got) != 1 || got[0] != "return=minimal" {
			t.Errorf("the client sent Prefer %q, want return=minimal", got)
		}
		if !errors.Is(res[1].Err, lease.ErrNotHeld) {
			t.Errorf("server ignoring Prefer %v: result 1 %v, want not held", ignored, res[1].Err)
		}
		for _, i := range []int{0, 2} {
			l, want := res[i].Lease, renewals[i]
			if res[i].Err != nil || l.Key != want.Lease.Key || l.Owner != want.Lease.Owner || l.Token != want.Lease.Token || l.ID != want.Lease.ID ||
				l.TTL != want.TTL || l.Expires.Before(before.Add(want.TTL).Add(-time.Second)) || l.Expires.After(time.Now().Add(want.TTL).Add(time.Second)) {
				t.Errorf("server ignoring Prefer %v: result %d %+v, %v; want %+v renewed for %v", ignored, i, l, res[i].Err, want.Lease, want.TTL)
			}
		}
	}
}
