package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
)

func TestAcquireJSONIsTheAPILease(t *testing.T) {
	b := memtest.New(t)
	r := cli(t, b, nil, nil, "acquire", "jobs/nightly", "--ttl", "10s", "--owner", "alice", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
	var got map[string]any
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stdout %q: %v", r.stdout, err)
	}
	cur, err := b.Get(t.Context(), "jobs/nightly")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"key":        "jobs/nightly",
		"owner":      "alice",
		"token":      json.Number(strconv.FormatUint(uint64(cur.Token), 10)),
		"ttl_ms":     json.Number("10000"),
		"expires_at": cur.Expires.UTC().Format("2006-01-02T15:04:05.000Z07:00"),
	}
	id, _ := got["id"].(string)
	delete(got, "id")
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v plus id", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// The printed id must be the lease's secret: it releases the lease,
	// and release -o json prints what the API answers, {} (docs/DESIGN.md:
	// -o json on acquire|renew|release|get|list).
	if _, err := lease.ParseID(id); err != nil {
		t.Fatalf("id %q: %v", id, err)
	}
	r = cli(t, b, nil, nil, "release", "jobs/nightly", "--id", id, "--token", strconv.FormatUint(uint64(cur.Token), 10), "-o", "json")
	if r.code != ExitOK || r.stdout != "{}\n" {
		t.Errorf("release -o json with the printed id: exit %d, stdout %q, stderr %q; want 0 and {}", r.code, r.stdout, r.stderr)
	}
	if _, err := b.Get(t.Context(), "jobs/nightly"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("after release Get = %v, want ErrNotFound", err)
	}
}

func TestAcquireTextThenRenewAndRelease(t *testing.T) {
	b := memtest.New(t)
	r := cli(t, b, nil, nil, "acquire", "job", "--ttl", "5s")
	if r.code != ExitOK {
		t.Fatalf("acquire: exit %d, stderr %q", r.code, r.stderr)
	}
	fields := map[string]string{}
	for _, f := range strings.Fields(r.stdout) {
		k, v, _ := strings.Cut(f, "=")
		fields[k] = v
	}
	cur, err := b.Get(t.Context(), "job")
	if err != nil {
		t.Fatal(err)
	}
	if fields["key"] != "job" || fields["token"] != strconv.FormatUint(uint64(cur.Token), 10) || fields["owner"] != cur.Owner || fields["ttl"] != "5s" {
		t.Errorf("text %q does not describe %+v", r.stdout, cur)
	}
	id, tok := fields["id"], fields["token"]

	r = cli(t, b, nil, nil, "renew", "job", "--id", id, "--token", tok, "--ttl", "20s", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("renew: exit %d, stderr %q", r.code, r.stderr)
	}
	var renewed leasehttp.LeaseJSON
	if err := json.Unmarshal([]byte(r.stdout), &renewed); err != nil {
		t.Fatal(err)
	}
	if strconv.FormatUint(uint64(renewed.Token), 10) != tok || renewed.TTLMillis != 20000 || renewed.ID != id {
		t.Errorf("renewed %+v, want token %s, ttl_ms 20000, id %s", renewed, tok, id)
	}
	after, _ := b.Get(t.Context(), "job")
	if !after.Expires.After(cur.Expires) {
		t.Errorf("renew did not move the expiry: %v then %v", cur.Expires, after.Expires)
	}

	r = cli(t, b, nil, nil, "release", "job", "--id", id, "--token", tok)
	if r.code != ExitOK || r.stdout != "released key=job token="+tok+"\n" {
		t.Fatalf("release: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := b.Get(t.Context(), "job"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("after release Get = %v, want ErrNotFound", err)
	}

	r = cli(t, b, nil, nil, "release", "job", "--id", id, "--token", tok, "-o", "json")
	if r.code != ExitNotHeld {
		t.Errorf("second release: exit %d, want %d", r.code, ExitNotHeld)
	}
	oneErrorLine(t, r, "not held")
	r = cli(t, b, nil, nil, "renew", "job", "--id", id, "--token", tok)
	if r.code != ExitNotHeld {
		t.Errorf("renew after release: exit %d, want %d", r.code, ExitNotHeld)
	}
	oneErrorLine(t, r, "not held")
}

func TestAcquireHeldNamesHolder(t *testing.T) {
	b := memtest.New(t)
	held, err := b.Acquire(t.Context(), "job", "worker-7", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r := cli(t, b, nil, nil, "acquire", "job", "--owner", "me")
	if r.code != ExitHeld || r.stdout != "" {
		t.Fatalf("exit %d stdout %q, want %d and nothing", r.code, r.stdout, ExitHeld)
	}
	oneErrorLine(t, r, `"worker-7"`, "token "+strconv.FormatUint(uint64(held.Token), 10))

	// Waiting that runs out says the same.
	r = cli(t, b, nil, nil, "acquire", "job", "--owner", "me", "--wait", "50ms")
	if r.code != ExitHeld {
		t.Fatalf("with --wait: exit %d, want %d (stderr %q)", r.code, ExitHeld, r.stderr)
	}
	oneErrorLine(t, r, `"worker-7"`)
}

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
	store := memtest.New(t)
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

func TestAcquireWaitGetsExpiredLease(t *testing.T) {
	b := memtest.New(t)
	first, err := b.Acquire(t.Context(), "job", "worker-7", 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r := cli(t, b, nil, nil, "acquire", "job", "--owner", "me", "--wait", "10s", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("exit %d stderr %q", r.code, r.stderr)
	}
	var got leasehttp.LeaseJSON
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Owner != "me" || got.Token <= first.Token {
		t.Errorf("got %+v after %+v", got, first)
	}
}

func TestGetAndListHideIDs(t *testing.T) {
	b := memtest.New(t)
	for _, k := range []string{"a/1", "a/2", "b/1"} {
		if _, err := b.Acquire(t.Context(), k, "o "+k, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	r := cli(t, b, nil, nil, "get", "a/2", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("get: exit %d stderr %q", r.code, r.stderr)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	if _, ok := got["id"]; ok || got["key"] != "a/2" || got["owner"] != "o a/2" {
		t.Errorf("get printed %v", got)
	}
	r = cli(t, b, nil, nil, "get", "a/2")
	if want := `owner="o a/2"`; !strings.Contains(r.stdout, want) || strings.Contains(r.stdout, "id=") {
		t.Errorf("get text %q, want %s and no id", r.stdout, want)
	}

	r = cli(t, b, nil, nil, "get", "nothing")
	if r.code != ExitNotFound || r.stdout != "" {
		t.Errorf("get missing: exit %d stdout %q", r.code, r.stdout)
	}
	oneErrorLine(t, r, `"nothing"`)

	r = cli(t, b, nil, nil, "list", "--prefix", "a/", "-o", "json")
	var list struct {
		Leases []map[string]any `json:"leases"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("list %q: %v", r.stdout, err)
	}
	var keys []string
	for _, l := range list.Leases {
		keys = append(keys, l["key"].(string))
		if _, ok := l["id"]; ok {
			t.Errorf("list shows an id: %v", l)
		}
	}
	if strings.Join(keys, ",") != "a/1,a/2" {
		t.Errorf("list --prefix a/ gave %v", keys)
	}
	r = cli(t, b, nil, nil, "list")
	if n := strings.Count(r.stdout, "\n"); n != 3 {
		t.Errorf("list text has %d lines, want 3: %q", n, r.stdout)
	}
	r = cli(t, b, nil, nil, "list", "--prefix", "zzz", "-o", "json")
	if strings.TrimSpace(r.stdout) != `{"leases":[]}` {
		t.Errorf("empty list printed %q", r.stdout)
	}
}

func TestServerAndTokenFromEnvironment(t *testing.T) {
	b := memtest.New(t)
	for _, tc := range []struct {
		name      string
		env       map[string]string
		args      []string
		wantURL   string
		wantToken string
	}{
		{"default", nil, nil, DefaultServer, ""},
		{"env", map[string]string{EnvServer: "http://10.0.0.1:1", EnvAuthToken: "s3cret"}, nil, "http://10.0.0.1:1", "s3cret"},
		{"flag beats env", map[string]string{EnvServer: "http://10.0.0.1:1"}, []string{"--server", "https://h:2"}, "https://h:2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, b, tc.env, nil, append([]string{"list"}, tc.args...)...)
			if r.code != ExitOK || r.url != tc.wantURL || r.token != tc.wantToken {
				t.Errorf("exit %d, dialled %q with token %q; want %q, %q", r.code, r.url, r.token, tc.wantURL, tc.wantToken)
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	id := lease.NewID().Reveal()
	for _, args := range [][]string{
		{"acquire"},
		{"acquire", "a", "b"},
		{"acquire", "job", "--ttl", "1ms"},
		{"acquire", "job", "--ttl", "48h"},
		{"acquire", "job", "-o", "yaml"},
		{"acquire", "job", "--wait", "-1s"},
		{"acquire", "job", "--bogus"},
		{"acquire", "bad\x01key"},
		{"acquire", strings.Repeat("k", lease.MaxKeyLen+1)},
		{"renew", "job", "--token", "1"},
		{"renew", "job", "--id", id},
		{"renew", "job", "--id", "xyz", "--token", "1"},
		{"renew", "job", "--id", id, "--token", "-1"},
		{"renew", "job", "--id", id, "--token", "9007199254740993"},
		{"release", "job", "--id", id},
		{"get"},
		{"list", "extra"},
		{"list", "--limit", "0"},
		{"list", "--limit", "-1"},
		{"list", "--limit", "10001"},
		{"list", "--after", "!!"},
		{"list", "--after", "YR"},
		{"list", "--prefix", "a\x01"},
		{"run", "job"},
		{"run", "job", "--"},
		{"run", "job", "echo", "hi"},
		{"run", "job", "--ttl", "20ms", "--", "true"},
		{"run", "job", "--grace", "-1s", "--", "true"},
		{"frobnicate"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			b := memtest.New(t)
			r := cli(t, b, nil, nil, args...)
			if r.code != ExitUsage {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, ExitUsage, r.stderr)
			}
			// A wrong argument count adds the command's usage line.
			if head, usage, ok := strings.Cut(r.stderr, "\nusage: "); ok {
				if !strings.HasPrefix(usage, "lease "+args[0]+" ") || strings.Count(usage, "\n") != 1 {
					t.Errorf("stderr %q: the usage line is not lease %s's alone", r.stderr, args[0])
				}
				r.stderr = head + "\n"
			}
			oneErrorLine(t, r)
			if r.url != "" && args[0] != "run" {
				t.Errorf("dialled %q despite the usage error", r.url)
			}
		})
	}
}
