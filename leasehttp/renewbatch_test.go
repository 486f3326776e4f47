package leasehttp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
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
