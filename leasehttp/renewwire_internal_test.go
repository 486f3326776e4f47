package leasehttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehq/lease"
)

// strs are strings encoding/json escapes in every way it has, and plain ones.
var strs = []string{
	"", "jobs/nightly", "a<b", "a>b", "a&b", `a"b`, `a\b`, "a\x00b", "a\x1fb", "a\x7fb", "\t\n\r",
	"é", "ü/日本", "\u2028", "\u2029", "a\u2028b\u2029", "\xff", "a\xc3", "\xed\xa0\x80", "😀", "\ufffd",
	"/", "'", "%2F", strings.Repeat("k", 1024), "<script>&amp;</script>",
}

func TestAppendJSONStringMatchesMarshal(t *testing.T) {
	for _, s := range strs {
		checkJSONString(t, s)
	}
	// Strings of a few bytes drawn from the ones that matter.
	const alphabet = "a<>&\"\\\x00\x1f\x7f\x80\xff\xc3\xa9\xe2\x80\xa8"
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := make([]byte, r.IntN(6))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		checkJSONString(t, string(b))
	}
}

func FuzzAppendJSONString(f *testing.F) {
	for _, s := range strs {
		f.Add(s)
	}
	f.Fuzz(checkJSONString)
}

func checkJSONString(t *testing.T, s string) {
	t.Helper()
	want, _ := json.Marshal(s)
	if got := appendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
		t.Fatalf("%q: appended %s, json.Marshal writes %s", s, got[1:], want)
	}
}

// renewResults are results of every kind the server answers.
func renewResults() []lease.RenewResult {
	exp := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	var out []lease.RenewResult
	for i, s := range strs {
		if s == "" {
			s = "k"
		}
		out = append(out, lease.RenewResult{Lease: lease.Lease{Key: s, Owner: strs[(i+3)%len(strs)], Token: lease.Token(i + 1),
			ID: lease.NewID(), TTL: time.Duration(i) * 1500 * time.Microsecond, Expires: exp.Add(time.Duration(i) * time.Hour)}})
	}
	zone := time.FixedZone("X", -5*3600)
	out = append(out,
		lease.RenewResult{Lease: lease.Lease{Key: "no-id", Owner: "o", Token: lease.MaxToken, TTL: lease.MaxTTL, Expires: exp.In(zone)}},
		lease.RenewResult{Lease: lease.Lease{Key: "zero-time", Token: 1}},
		lease.RenewResult{Lease: lease.Lease{Key: "same-1", Token: 1, Expires: exp}},
		lease.RenewResult{Lease: lease.Lease{Key: "same-2", Token: 1, Expires: exp.In(zone)}},
		lease.RenewResult{Lease: lease.Lease{Key: "same-3", Token: 1, Expires: exp}},
		lease.RenewResult{Lease: lease.Lease{Key: "next-ms", Token: 1, Expires: exp.Add(time.Millisecond)}},
		lease.RenewResult{Err: fmt.Errorf("leasehttp: renew %s: %w", quoteName("a<b&c>"), lease.ErrNotHeld)},
		lease.RenewResult{Err: lease.ErrNotHeld},
		lease.RenewResult{Err: fmt.Errorf("odd \u2028 \xff: %w", lease.ErrUnavailable)},
	)
	return out
}

// marshalRenewAnswer is the answer as the server wrote it with
// encoding/json.
func marshalRenewAnswer(results []lease.RenewResult) []byte {
	out := renewBatchJSON{Results: make([]renewResultJSON, len(results))}
	for i, res := range results {
		if res.Err != nil {
			out.Results[i].Error = &errorDetail{Code: kindOf(res.Err).code, Message: res.Err.Error()}
			continue
		}
		j := NewLeaseJSON(res.Lease, true)
		out.Results[i].Lease = &j
	}
	b, _ := json.Marshal(out)
	return b
}

func TestAppendRenewAnswerMatchesMarshal(t *testing.T) {
	results := renewResults()
	for i := range results {
		one := results[i : i+1]
		if got, want := appendRenewAnswer(nil, one), marshalRenewAnswer(one); string(got) != string(want) {
			t.Errorf("result %d: appended\n%s\njson.Marshal writes\n%s", i, got, want)
		}
	}
	if got, want := appendRenewAnswer([]byte{}, results), marshalRenewAnswer(results); string(got) != string(want) {
		t.Errorf("all results: appended\n%s\njson.Marshal writes\n%s", got, want)
	}
}

// renewBatchBody is POST /v1/renew's body as the client wrote it with
// encoding/json.
type renewBatchBody struct {
	Renewals []renewItem `json:"renewals"`
}

type renewItem struct {
	Key   string      `json:"key"`
	ID    string      `json:"id"`
	Token lease.Token `json:"token"`
	TTLms int64       `json:"ttl_ms"`
}

func TestAppendRenewRequestMatchesMarshal(t *testing.T) {
	var renewals []lease.Renewal
	for i, s := range strs {
		renewals = append(renewals, lease.Renewal{Lease: lease.Lease{Key: s, Token: lease.Token(i + 1), ID: lease.NewID()},
			TTL: time.Duration(i)*time.Second + time.Duration(i)*time.Microsecond})
	}
	renewals = append(renewals, lease.Renewal{Lease: lease.Lease{Key: "max", Token: lease.MaxToken, ID: lease.NewID()}, TTL: lease.MaxTTL})
	for n := 1; n <= len(renewals); n++ {
		body := renewBatchBody{}
		for _, r := range renewals[:n] {
			body.Renewals = append(body.Renewals, renewItem{Key: r.Lease.Key, ID: r.Lease.ID.Reveal(), Token: r.Lease.Token, TTLms: ttlMillis(r.TTL)})
		}
		want, _ := json.Marshal(body)
		if got := appendRenewRequest(nil, renewals[:n]); string(got) != string(want) {
			t.Fatalf("%d renewals: appended\n%s\njson.Marshal writes\n%s", n, got, want)
		}
	}
}

// scanRenewals are the renewals the answers below are for.
var scanRenewals = []lease.Renewal{
	{Lease: lease.Lease{Key: "jobs/a", Token: 7, ID: lease.ID{1}}, TTL: time.Second},
	{Lease: lease.Lease{Key: "ü/日本<&>", Token: 9007199254740992, ID: lease.ID{2}}, TTL: time.Second},
	{Lease: lease.Lease{Key: "k", Token: 1, ID: lease.ID{3}}, TTL: time.Second},
}

// renewAnswers are answers to scanRenewals as the server writes them, and
// near misses of every kind.
var renewAnswers = func() []string {
	const (
		id  = `"id":"9f86d081884c7d659a2feaa0c55ad015"`
		exp = `"expires_at":"2026-12-02T10:00:00.000Z"`
	)
	a := `{"lease":{"key":"jobs/a","owner":"host-42","token":7,` + id + `,"ttl_ms":30000,` + exp + `}}`
	b := `{"lease":{"key":"ü/日本\u003c\u0026\u003e","owner":"host-42","token":9007199254740992,` + id + `,"ttl_ms":1000,` + exp + `}}`
	c := `{"error":{"code":"not_held","message":"leasehttp: renew \"k\": lease not held"}}`
	ok := func(third string) string { return `{"results":[` + a + `,` + b + `,` + third + `]}` }
	lease3 := func(members string) string { return ok(`{"lease":{` + members + `}}`) }
	answers := []string{
		ok(c),
		lease3(`"key":"k","owner":"o","token":1,` + exp),
		lease3(`"key":"k","token":1,` + exp),
		lease3(`"key":"k","owner":"host-42","token":1,"id":"",` + exp),
		lease3(`"key":"k","owner":"o","token":1,"id":"9F86D081884C7D659A2FEAA0C55AD015",` + exp),
		lease3(`"key":"k","owner":"o","token":1,"id":"00000000000000000000000000000000",` + exp),
		lease3(`"key":"k","owner":"o","token":1,"id":"9f86d081884c7d659a2feaa0c55ad01",` + exp),
		lease3(`"key":"k","owner":"o","token":1,"id":"9f86d081884c7d659a2feaa0c55ad01g",` + exp),
		lease3(`"key":"k","owner":"o","token":1,"id":7,` + exp),
		lease3(`"expires_at":"2026-12-02T10:00:00.000Z","ttl_ms":0,"token":1,"owner":"o","key":"k"`),
		lease3(` "key" : "k" , "owner" : "o" , "token" : 1 , "expires_at" : "2026-12-02T10:00:00.000Z" `),
		lease3(`"k\u0065y":"\u006b","owner":"\u00e9\ud83d\ude00","token":1,` + exp),
		lease3(`"key":"k","owner":"\ud800","token":1,` + exp),
		lease3(`"key":"k","owner":"` + "\xff" + `","token":1,` + exp),
		lease3(`"key":"K","owner":"o","token":1,` + exp),
		lease3(`"KEY":"k","owner":"o","token":1,` + exp),
		lease3(`"key":"k","key":"k","owner":"o","token":1,` + exp),
		lease3(`"key":"k","owner":"o","owner":"p","token":1,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"token":1,` + exp),
		lease3(`"key":"k","owner":"o","token":1,` + exp + `,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"ttl_ms":1,"ttl_ms":2,` + exp),
		lease3(`"key":"k","owner":"o","token":1,` + id + `,"id":"",` + exp),
		lease3(`"key":"k","owner":"o","token":1,"holder":{},` + exp),
		lease3(`"key":"k","owner":"o","token":1,"x":1,` + exp),
		lease3(`"key":"k","owner":null,"token":1,` + exp),
		lease3(`"key":"k","owner":"o","token":2,` + exp),
		lease3(`"key":"k","owner":"o","token":01,` + exp),
		lease3(`"key":"k","owner":"o","token":1.0,` + exp),
		lease3(`"key":"k","owner":"o","token":1e0,` + exp),
		lease3(`"key":"k","owner":"o","token":-1,` + exp),
		lease3(`"key":"k","owner":"o","token":"1",` + exp),
		lease3(`"key":"k","owner":"o","token":18446744073709551617,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"ttl_ms":` + fmt.Sprint(lease.MaxTTL.Milliseconds()) + `,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"ttl_ms":` + fmt.Sprint(lease.MaxTTL.Milliseconds()+1) + `,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"ttl_ms":9223372036854775808,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"ttl_ms":-1,` + exp),
		lease3(`"key":"k","owner":"o","token":1`),
		lease3(`"owner":"o","token":1,` + exp),
		lease3(`"key":"k","owner":"o",` + exp),
		lease3(`"key":"k","owner":"o","token":1,`),
		lease3(`,"key":"k","owner":"o","token":1,` + exp),
		lease3(`"key":"k",,"owner":"o","token":1,` + exp),
		lease3(`"key":"k" "owner":"o","token":1,` + exp),
		ok(`{"lease":{"key":"k","token":1,` + exp + `},"error":{"code":"not_held","message":"m"}}`),
		ok(`{"error":{"code":"not_held","message":"m"},"lease":{"key":"k","token":1,` + exp + `}}`),
		ok(`{"error":{"message":"m","code":"not_held"}}`),
		ok(`{"error":{"code":"not_held"}}`),
		ok(`{"error":{"code":"not_held","message":"m","message":"n"}}`),
		ok(`{"error":{"code":"held","message":"m"}}`),
		ok(`{"error":{"code":"unavailable","message":"m"}}`),
		ok(`{"error":{"code":"nope","message":"m"}}`),
		ok(`{"error":{"code":"not_held","message":"m","holder":{"key":"k"}}}`),
		ok(`{"error":{"code":"not_held","message":1}}`),
		ok(`{"error":null}`), ok(`{"lease":null}`), ok(`{}`), ok(`null`), ok(`[]`),
		`{"results":[` + a + `,` + b + `]}`,
		`{"results":[` + a + `,` + b + `,` + c + `,` + c + `]}`,
		`{"results":[]}`, `{"results":null}`, `{"results":{}}`, `{}`, `null`, ``, `[]`,
		`{"results":[` + a + `,` + b + `,` + c + `],"x":1}`,
		`{"x":1,"results":[` + a + `,` + b + `,` + c + `]}`,
		`{"Results":[` + a + `,` + b + `,` + c + `]}`,
		`{"results":[` + a + `,` + b + `,` + c + `]}` + "\n",
		`{"results":[` + a + `,` + b + `,` + c + `]} x`,
		`{"results":[` + a + `,` + b + `,` + c + `]`,
		`{"results":[` + a + `,` + b + `,` + c,
		`{"results":[` + a + `,` + b + `,` + c + `,]}`,
		`{"results":[` + a + `;` + b + `,` + c + `]}`,
		"\t{ \"results\" :\n[ " + a + " ,\r" + b + " , " + c + " ] } ",
	}
	for _, e := range []string{"2026-12-02T10:00:00Z", "2026-12-02T10:00:00.123456789Z", "2026-12-02T10:00:00.000+05:30",
		"2026-12-02T10:00:00.000z", "2026-12-02t10:00:00.000Z", "2026-12-02 10:00:00.000Z", "2024-02-29T00:00:00.000Z",
		"2100-02-29T00:00:00.000Z", "2000-02-29T00:00:00.000Z", "2026-02-29T00:00:00.000Z", "2026-04-31T00:00:00.000Z",
		"2026-12-31T23:59:59.999Z", "2026-13-01T00:00:00.000Z", "2026-00-01T00:00:00.000Z", "2026-12-00T00:00:00.000Z",
		"2026-12-02T24:00:00.000Z", "2026-12-02T10:60:00.000Z", "2026-12-02T10:00:60.000Z", "0000-01-01T00:00:00.000Z",
		"9999-12-31T23:59:59.999Z", "2026-1a-02T10:00:00.000Z", "2026-12-02T10:00:00.0a0Z", "+026-12-02T10:00:00.000Z",
		"2026-12-02T10:00:00.000", "", "x"} {
		answers = append(answers, lease3(`"key":"k","owner":"o","token":1,"expires_at":"`+e+`"`))
	}
	return answers
}()

// checkRenewScan holds scanRenewAnswer to the json.Unmarshal reading
// RenewBatch fell back on: whatever it accepts, that must read the same
// way, and what it refuses it leaves as it found.
func checkRenewScan(t *testing.T, body []byte) {
	t.Helper()
	got := make([]lease.RenewResult, len(scanRenewals))
	if !scanRenewAnswer(body, scanRenewals, got) {
		return
	}
	want, err := renewAnswer(&response{status: 200, body: body}, scanRenewals, make([]lease.RenewResult, len(scanRenewals)), "w")
	if err != nil {
		t.Fatalf("%q: scanned; json.Unmarshal's reading refuses it: %v", body, err)
	}
	for i := range got {
		g, w := got[i], want[i]
		switch {
		case (g.Err == nil) != (w.Err == nil),
			g.Err != nil && (g.Err.Error() != w.Err.Error() || !errors.Is(g.Err, lease.ErrNotHeld)),
			g.Lease.Key != w.Lease.Key, g.Lease.Owner != w.Lease.Owner, g.Lease.Token != w.Lease.Token,
			g.Lease.ID != w.Lease.ID, g.Lease.TTL != w.Lease.TTL, !sameTime(g.Lease.Expires, w.Lease.Expires):
			t.Fatalf("%q: result %d scanned as %+v (%v); json.Unmarshal's reading is %+v (%v)", body, i, g.Lease, g.Err, w.Lease, w.Err)
		}
	}
}

// sameTime reports whether a and b are the same instant in the same zone
// (time.Parse makes a new zone for each offset it reads).
func sameTime(a, b time.Time) bool {
	if a.Location() == b.Location() {
		return a == b
	}
	an, ao := a.Zone()
	bn, bo := b.Zone()
	return a.Equal(b) && an == bn && ao == bo
}

func TestScanRenewAnswerMatchesUnmarshal(t *testing.T) {
	for _, body := range append(renewAnswers, tricky...) {
		checkRenewScan(t, []byte(body))
	}
	if !scanRenewAnswer([]byte(renewAnswers[0]), scanRenewals, make([]lease.RenewResult, 3)) {
		t.Fatalf("%s was not scanned", renewAnswers[0])
	}
	// The server's own answers are scanned, not left to json.Unmarshal:
	// every result but the refusals other than not_held, for keys that
	// are text (as every key is).
	var results []lease.RenewResult
	var renewals []lease.Renewal
	for _, r := range renewResults() {
		switch {
		case r.Err != nil && !errors.Is(r.Err, lease.ErrNotHeld), r.Err == nil && !utf8.ValidString(r.Lease.Key):
			continue
		case r.Err != nil:
			renewals = append(renewals, lease.Renewal{Lease: lease.Lease{Key: "other", Token: 1, ID: lease.NewID()}, TTL: time.Second})
		default:
			renewals = append(renewals, lease.Renewal{Lease: lease.Lease{Key: r.Lease.Key, Token: r.Lease.Token, ID: lease.NewID()}, TTL: time.Second})
		}
		results = append(results, r)
	}
	body := appendRenewAnswer(nil, results)
	got := make([]lease.RenewResult, len(renewals))
	if !scanRenewAnswer(body, renewals, got) {
		t.Fatalf("the server's own answer was not scanned:\n%s", body)
	}
	for i, r := range results {
		switch g := got[i]; {
		case r.Err != nil && !errors.Is(g.Err, lease.ErrNotHeld):
			t.Errorf("result %d: scanned %v, want not held", i, g.Err)
		case r.Err == nil && (g.Err != nil || g.Lease.Key != r.Lease.Key || g.Lease.Owner != string([]rune(r.Lease.Owner)) ||
			g.Lease.Token != r.Lease.Token || g.Lease.ID != r.Lease.ID || g.Lease.TTL != r.Lease.TTL.Truncate(time.Millisecond) ||
			!g.Lease.Expires.Equal(r.Lease.Expires.Truncate(time.Millisecond))):
			t.Errorf("result %d: scanned %+v (%v), sent %+v", i, g.Lease, g.Err, r.Lease)
		}
	}
	// An answer holds as many results as there were renewals.
	four := append(slices.Clone(scanRenewals), scanRenewals[0])
	for _, body := range renewAnswers {
		full := scanRenewAnswer([]byte(body), scanRenewals, make([]lease.RenewResult, 3))
		for _, n := range []int{0, 1, 2, 4} {
			if full && scanRenewAnswer([]byte(body), four[:n], make([]lease.RenewResult, n)) {
				t.Fatalf("%q scanned as the answer to 3 renewals and to %d", body, n)
			}
		}
	}
}

func FuzzScanRenewAnswer(f *testing.F) {
	for _, body := range renewAnswers {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkRenewScan(t, body) })
}

func TestParseExpiresMatchesTimeParse(t *testing.T) {
	check := func(s string) {
		t.Helper()
		got, ok := parseExpires([]byte(s))
		want, err := time.Parse(time.RFC3339Nano, s)
		if ok != (err == nil) || got != want {
			t.Fatalf("%q: parsed %v (%v); time.Parse reads %v (%v)", s, got, ok, want, err)
		}
	}
	start := time.Date(1999, 12, 31, 0, 0, 0, 0, time.UTC)
	for d := range 3 * 366 * 24 {
		check(start.Add(time.Duration(d)*time.Hour + time.Duration(d)*time.Millisecond).Format(expiresLayout))
	}
	for y := range 10000 {
		for _, md := range []string{"02-28", "02-29", "02-30", "01-31", "04-30", "04-31", "12-31"} {
			check(fmt.Sprintf("%04d-%sT23:59:59.999Z", y, md))
		}
	}
}
