package leasehttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/leasehq/lease/leasehttp"
)

// stats is GET /v1/stats's answer as the tests read it.
type stats struct {
	Now             string `json:"now"`
	Acquisitions    uint64 `json:"acquisitions"`
	AcquireRefusals uint64 `json:"acquire_refusals"`
	RenewFailures   uint64 `json:"renew_failures"`
	Renewals        uint64 `json:"renewals"`
	Releases        uint64 `json:"releases"`
	ActiveLeases    int64  `json:"active_leases"`
	Waiters         int64  `json:"waiters"`
	Watchers        int64  `json:"watchers"`
	Waiting         []struct {
		Key     string `json:"key"`
		Waiters int    `json:"waiters"`
	} `json:"waiting"`
}

// waiting is s.Waiting as "key=n" strings, in the answer's order.
func (s stats) waiting() []string {
	out := []string{}
	for _, w := range s.Waiting {
		out = append(out, fmt.Sprintf("%s=%d", w.Key, w.Waiters))
	}
	return out
}

func getStats(t *testing.T, url, token string) stats {
	t.Helper()
	status, body := call(t, "GET", url, token, "")
	if status != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d %s", url, status, body)
	}
	var s stats
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, body)
	}
	return s
}

// TestStats: GET /v1/stats counts what the server did, and names the keys
// with waiting acquires only where the credential reaches.
func TestStats(t *testing.T) {
	const admin, jobs = "admin-token-long-enough-for-tests", "jobs-token-long-enough-for-tests"
	_, hs := startServer(t, backendOnly{newMem(t)}, leasehttp.WithCredentials([]leasehttp.Credential{
		{Token: admin, Prefixes: []string{"*"}},
		{Token: jobs, Prefixes: []string{"jobs/"}},
	}))
	before := time.Now().Add(-time.Second)
	s := getStats(t, hs.URL+"/v1/stats", admin)
	if s.Acquisitions != 0 || s.ActiveLeases != 0 || len(s.Waiting) != 0 {
		t.Fatalf("a new server's stats: %+v, want zeros", s)
	}
	if now, err := time.Parse(time.RFC3339Nano, s.Now); err != nil || now.Before(before) || now.After(time.Now().Add(time.Second)) {
		t.Errorf("now = %q (%v), want the server's clock", s.Now, err)
	}

	acquire := func(key, token string) {
		status, body := call(t, "POST", hs.URL+"/v1/leases/"+key+"/acquire", token, `{"owner":"o","ttl_ms":60000}`)
		if status != 200 {
			t.Fatalf("acquire %s: HTTP %d %s", key, status, body)
		}
	}
	acquire("jobs%2Fa", admin)
	acquire("other", admin)
	if status, _ := call(t, "POST", hs.URL+"/v1/leases/other/acquire", admin, `{"owner":"o","ttl_ms":60000}`); status != 409 {
		t.Fatalf("second acquire of other: HTTP %d, want 409", status)
	}
	if status, _ := call(t, "POST", hs.URL+"/v1/leases/other/renew", admin,
		`{"id":"0123456789abcdef0123456789abcdef","token":1,"ttl_ms":60000}`); status != 409 {
		t.Fatalf("renew with a wrong id: HTTP %d, want 409", status)
	}
	// One waiter on each key, through the server's own queue.
	done := make(chan int, 2)
	for _, key := range []string{"jobs%2Fa", "other"} {
		go func() {
			status, _ := call(t, "POST", hs.URL+"/v1/leases/"+key+"/acquire", admin, `{"owner":"w","ttl_ms":60000,"wait_ms":300}`)
			done <- status
		}()
	}
	eventually(t, "two waiters counted", func() bool { return getStats(t, hs.URL+"/v1/stats", admin).Waiters == 2 })

	s = getStats(t, hs.URL+"/v1/stats", admin)
	if s.Acquisitions != 2 || s.AcquireRefusals != 1 || s.RenewFailures != 1 || s.ActiveLeases != 2 {
		t.Errorf("stats = %+v; want 2 acquisitions, 1 refusal, 1 renew failure, 2 active", s)
	}
	if got, want := s.waiting(), []string{"jobs/a=1", "other=1"}; !slices.Equal(got, want) {
		t.Errorf("admin's waiting = %v, want %v", got, want)
	}
	if got := getStats(t, hs.URL+"/v1/stats?prefix=jobs/", admin).waiting(); !slices.Equal(got, []string{"jobs/a=1"}) {
		t.Errorf("admin's waiting under jobs/ = %v, want jobs/a only", got)
	}
	sj := getStats(t, hs.URL+"/v1/stats", jobs)
	if got := sj.waiting(); !slices.Equal(got, []string{"jobs/a=1"}) {
		t.Errorf("jobs credential's waiting = %v, want jobs/a only", got)
	}
	if sj.Acquisitions != 2 {
		t.Errorf("jobs credential's acquisitions = %d, want the server-wide 2", sj.Acquisitions)
	}
	if w := getStats(t, hs.URL+"/v1/stats?prefix=other", jobs).Waiting; len(w) != 0 {
		t.Errorf("jobs credential's waiting under other = %v, want none", w)
	}
	for range 2 {
		if status := <-done; status != 409 {
			t.Errorf("waiter: HTTP %d, want 409 when its wait ran out", status)
		}
	}
	if w := getStats(t, hs.URL+"/v1/stats", admin); w.Waiters != 0 || len(w.Waiting) != 0 {
		t.Errorf("after the waits: waiters %d, waiting %v; want none", w.Waiters, w.Waiting)
	}

	for _, tc := range []struct {
		target, token string
		status        int
	}{
		{"/v1/stats", "", 401},
		{"/v1/stats", "wrong-token-long-enough-for-tests", 401},
		{"/v1/stats?limit=3", admin, 400},
		{"/v1/stats?prefix=a&prefix=b", admin, 400},
		{"/v1/stats?prefix=%01", admin, 400},
	} {
		if status, body := call(t, "GET", hs.URL+tc.target, tc.token, ""); status != tc.status {
			t.Errorf("GET %s: HTTP %d %s, want %d", tc.target, status, body, tc.status)
		}
	}
}

// TestStatsHostCheck: without credentials the figures are answered to
// loopback Hosts only, as the leases are.
func TestStatsHostCheck(t *testing.T) {
	srv := newServer(t, newMem(t))
	req, err := http.NewRequest("GET", "http://lease.example/v1/stats", nil)
	if err != nil {
		t.Fatal(err)
	}
	if rec := serveRequest(srv, req); rec.Code != http.StatusForbidden {
		t.Errorf("GET /v1/stats with Host lease.example: HTTP %d, want 403", rec.Code)
	}
}
