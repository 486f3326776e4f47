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

// The wire codec (wire.go, scan.go) is held to encoding/json both ways:
// every body it writes is byte for byte json.Marshal of the shape's
// reference types below, so json.Unmarshal reads it back the same; and
// every body its readers accept, json.Unmarshal reads the same way
// (through the checks the client makes of what it read), so what
// encoding/json refuses, they refuse.

// The shapes as encoding/json types: the reference.
type (
	errorJSON struct {
		Error errorDetail `json:"error"`
	}
	errorDetail struct {
		Code    string     `json:"code"`
		Message string     `json:"message"`
		Holder  *LeaseJSON `json:"holder,omitempty"`
	}
	listJSON struct {
		Leases []LeaseJSON `json:"leases"`
		Next   string      `json:"next"`
	}
	renewBatchJSON struct {
		Results []renewResultJSON `json:"results"`
	}
	renewResultJSON struct {
		Lease *LeaseJSON   `json:"lease,omitempty"`
		Error *errorDetail `json:"error,omitempty"`
		// The minimal answer's (Prefer: return=minimal).
		TTLms     *uint64 `json:"ttl_ms,omitempty"`
		ExpiresAt *string `json:"expires_at,omitempty"`
	}
	acquireBody struct {
		Owner  string `json:"owner"`
		TTLms  int64  `json:"ttl_ms"`
		WaitMS int64  `json:"wait_ms,omitempty"`
		Ticket string `json:"ticket,omitempty"`
		Last   bool   `json:"last,omitempty"`
	}
	renewBody struct {
		ID    string      `json:"id"`
		Token lease.Token `json:"token"`
		TTLms int64       `json:"ttl_ms"`
	}
	releaseBody struct {
		ID    string      `json:"id"`
		Token lease.Token `json:"token"`
	}
	renewBatchBody struct {
		Renewals []renewItem `json:"renewals"`
	}
	renewItem struct {
		Key   string      `json:"key"`
		ID    string      `json:"id"`
		Token lease.Token `json:"token"`
		TTLms int64       `json:"ttl_ms"`
	}
)

// Writing.

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

// sameBytes fails unless the codec wrote what json.Marshal writes of ref.
func sameBytes(t *testing.T, what string, got []byte, ref any) {
	t.Helper()
	want, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s: appended\n%s\njson.Marshal writes\n%s", what, got, want)
	}
}

// wireLeases are leases of every kind the server writes: odd keys and
// owners, every token and TTL edge, expiries in other zones, no ID.
func wireLeases() []lease.Lease {
	exp := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.UTC)
	zone := time.FixedZone("X", -5*3600)
	var out []lease.Lease
	for i, s := range strs {
		if s == "" {
			s = "k"
		}
		out = append(out, lease.Lease{Key: s, Owner: strs[(i+3)%len(strs)], Token: lease.Token(i + 1),
			ID: lease.NewID(), TTL: time.Duration(i) * 1500 * time.Microsecond, Expires: exp.Add(time.Duration(i) * time.Hour)})
	}
	return append(out,
		lease.Lease{Key: "no-id", Owner: "o", Token: lease.MaxToken, TTL: lease.MaxTTL, Expires: exp.In(zone)},
		lease.Lease{Key: "zero-time", Token: 1},
		lease.Lease{Key: "same-1", Token: 1, Expires: exp},
		lease.Lease{Key: "same-2", Token: 1, Expires: exp.In(zone)},
		lease.Lease{Key: "same-3", Token: 1, Expires: exp},
		lease.Lease{Key: "next-ms", Token: 1, Expires: exp.Add(time.Millisecond)},
		lease.Lease{Key: "sub-ms", Token: 1, TTL: 999 * time.Microsecond, Expires: exp.Add(-time.Nanosecond)},
	)
}

// renewResults are results of every kind the server answers.
func renewResults() []lease.RenewResult {
	var out []lease.RenewResult
	for _, l := range wireLeases() {
		out = append(out, lease.RenewResult{Lease: l})
	}
	return append(out,
		lease.RenewResult{Err: fmt.Errorf("leasehttp: renew %s: %w", quoteName("a<b&c>"), lease.ErrNotHeld)},
		lease.RenewResult{Err: lease.ErrNotHeld},
		lease.RenewResult{Err: fmt.Errorf("odd \u2028 \xff: %w", lease.ErrUnavailable)},
	)
}

func TestAppendLeaseMatchesMarshal(t *testing.T) {
	for _, l := range wireLeases() {
		for _, withID := range []bool{true, false} {
			sameBytes(t, fmt.Sprintf("%+v", l), appendLease(nil, l, withID, nil), NewLeaseJSON(l, withID))
		}
	}
}

func FuzzAppendLease(f *testing.F) {
	f.Add("jobs/a", "o", uint64(7), []byte{1}, int64(time.Second), int64(1e18), int32(0))
	f.Add("a<b", "\xff", uint64(lease.MaxToken), []byte{}, int64(lease.MaxTTL), int64(-1), int32(-3600))
	f.Fuzz(func(t *testing.T, key, owner string, token uint64, id []byte, ttl, unixNano int64, offset int32) {
		l := lease.Lease{Key: key, Owner: owner, Token: lease.Token(token), TTL: time.Duration(ttl),
			Expires: time.Unix(0, unixNano).In(time.FixedZone("", int(offset%86400)))}
		copy(l.ID[:], id)
		for _, withID := range []bool{true, false} {
			sameBytes(t, fmt.Sprintf("%+v", l), appendLease(nil, l, withID, nil), NewLeaseJSON(l, withID))
		}
	})
}

// marshalRenewAnswer is the answer as encoding/json writes it.
func marshalRenewAnswer(results []lease.RenewResult) renewBatchJSON {
	out := renewBatchJSON{Results: make([]renewResultJSON, len(results))}
	for i, res := range results {
		if res.Err != nil {
			out.Results[i].Error = &errorDetail{Code: kindOf(res.Err).code, Message: res.Err.Error()}
			continue
		}
		j := NewLeaseJSON(res.Lease, true)
		out.Results[i].Lease = &j
	}
	return out
}

// marshalRenewAnswerMinimal is the minimal answer as encoding/json writes
// it.
func marshalRenewAnswerMinimal(results []lease.RenewResult) renewBatchJSON {
	out := marshalRenewAnswer(results)
	for i, res := range results {
		if res.Err == nil {
			ttl, exp := uint64(res.Lease.TTL.Milliseconds()), res.Lease.Expires.UTC().Format(expiresLayout)
			out.Results[i] = renewResultJSON{TTLms: &ttl, ExpiresAt: &exp}
		}
	}
	return out
}

func TestAppendRenewAnswerMatchesMarshal(t *testing.T) {
	results := renewResults()
	for i := range results {
		one := results[i : i+1]
		sameBytes(t, fmt.Sprintf("result %d", i), appendRenewAnswer(nil, one, false), marshalRenewAnswer(one))
		sameBytes(t, fmt.Sprintf("minimal result %d", i), appendRenewAnswer(nil, one, true), marshalRenewAnswerMinimal(one))
	}
	sameBytes(t, "all results", appendRenewAnswer([]byte{}, results, false), marshalRenewAnswer(results))
	sameBytes(t, "all minimal results", appendRenewAnswer([]byte{}, results, true), marshalRenewAnswerMinimal(results))
}

func TestAppendListMatchesMarshal(t *testing.T) {
	ls := wireLeases()
	for n := range len(ls) + 1 {
		for _, next := range []string{"", lease.Cursor(ls[0].Key)} {
			ref := listJSON{Leases: []LeaseJSON{}, Next: next}
			for _, l := range ls[:n] {
				ref.Leases = append(ref.Leases, NewLeaseJSON(l, false))
			}
			sameBytes(t, fmt.Sprintf("%d leases", n), appendList(nil, lease.ListPage{Leases: ls[:n], Next: next}), ref)
		}
	}
}

func TestAppendErrorMatchesMarshal(t *testing.T) {
	exp := time.Date(2026, 12, 4, 10, 0, 0, 123456789, time.FixedZone("X", 3600))
	holders := []*lease.HeldError{nil, {Key: "k", Owner: "o", Token: 7, Expires: exp}, {Key: "a<b", Token: lease.MaxToken}}
	for _, s := range strs {
		holders = append(holders, &lease.HeldError{Key: s, Owner: s, Token: 1, Expires: exp})
	}
	for _, h := range holders {
		for _, msg := range strs {
			ref := errorJSON{Error: errorDetail{Code: "held", Message: msg}}
			if h != nil {
				ref.Error.Holder = &LeaseJSON{Key: h.Key, Owner: h.Owner, Token: h.Token, ExpiresAt: h.Expires.UTC().Format(expiresLayout)}
			}
			sameBytes(t, fmt.Sprintf("%q, %+v", msg, h), appendError(nil, "held", msg, h), ref)
		}
	}
}

func TestAppendRequestsMatchMarshal(t *testing.T) {
	var renewals []lease.Renewal
	for i, s := range strs {
		renewals = append(renewals, lease.Renewal{Lease: lease.Lease{Key: s, Token: lease.Token(i + 1), ID: lease.NewID()},
			TTL: time.Duration(i)*time.Second + time.Duration(i)*time.Microsecond})
	}
	renewals = append(renewals, lease.Renewal{Lease: lease.Lease{Key: "max", Token: lease.MaxToken, ID: lease.NewID()}, TTL: lease.MaxTTL})
	for n := 1; n <= len(renewals); n++ {
		ref := renewBatchBody{}
		for _, r := range renewals[:n] {
			ref.Renewals = append(ref.Renewals, renewItem{Key: r.Lease.Key, ID: r.Lease.ID.Reveal(), Token: r.Lease.Token, TTLms: ttlMillis(r.TTL)})
		}
		sameBytes(t, fmt.Sprintf("%d renewals", n), appendRenewBatchRequest(nil, renewals[:n]), ref)
	}
	for _, r := range renewals {
		sameBytes(t, "renew", appendRenewRequest(nil, r.Lease, r.TTL, false),
			renewBody{ID: r.Lease.ID.Reveal(), Token: r.Lease.Token, TTLms: ttlMillis(r.TTL)})
		sameBytes(t, "release", appendReleaseRequest(nil, r.Lease), releaseBody{ID: r.Lease.ID.Reveal(), Token: r.Lease.Token})
	}
	for i, owner := range strs {
		for _, wait := range []time.Duration{0, time.Microsecond, time.Millisecond, MaxMaxWait} {
			for _, ticket := range []lease.ID{{}, lease.NewID()} {
				for _, last := range []bool{false, true} {
					ttl := time.Duration(i)*time.Second + time.Nanosecond
					ref := acquireBody{Owner: owner, TTLms: ttlMillis(ttl), WaitMS: wait.Milliseconds()}
					if !ticket.IsZero() {
						ref.Ticket, ref.Last = ticket.Reveal(), last
					}
					sameBytes(t, "acquire", appendAcquireRequest(nil, owner, ttl, wait, ticket, last), ref)
				}
			}
		}
	}
}

// The codec reads back what it writes: every lease the server sends, as
// the client takes it (the API counts in milliseconds).
func TestWireRoundTrip(t *testing.T) {
	var ls []lease.Lease
	for _, l := range wireLeases() {
		if utf8.ValidString(l.Key) && lease.ValidateKey(l.Key) == nil {
			l.Owner = strings.ToValidUTF8(l.Owner, "\ufffd") // what encoding/json sends of it
			ls = append(ls, l)
		}
	}
	sent := func(l lease.Lease, withID bool) lease.Lease {
		l.TTL = l.TTL.Truncate(time.Millisecond)
		l.Expires = l.Expires.Truncate(time.Millisecond).UTC()
		if !withID {
			l.ID = lease.ID{}
		}
		return l
	}
	same := func(what string, got, want lease.Lease) {
		t.Helper()
		if got.Key != want.Key || got.Owner != want.Owner || got.Token != want.Token || got.ID != want.ID ||
			got.TTL != want.TTL || got.Expires != want.Expires {
			t.Errorf("%s: read back %+v, sent %+v", what, got, want)
		}
	}
	for _, l := range ls {
		for _, withID := range []bool{true, false} {
			got, err := readLease(appendLease(nil, l, withID, nil))
			if err != nil {
				t.Fatalf("%+v: %v", l, err)
			}
			same("lease", got, sent(l, withID))
		}
	}
	p, err := readList(appendList(nil, lease.ListPage{Leases: ls, Next: "n"}))
	if err != nil || len(p.Leases) != len(ls) || p.Next != "n" {
		t.Fatalf("list: read %d leases, next %q (%v); sent %d", len(p.Leases), p.Next, err, len(ls))
	}
	for i, l := range ls {
		same("list", p.Leases[i], sent(l, false))
	}
	var results []lease.RenewResult
	var renewals []lease.Renewal
	for _, l := range ls {
		results = append(results, lease.RenewResult{Lease: l}, lease.RenewResult{Err: lease.ErrNotHeld})
		renewals = append(renewals, lease.Renewal{Lease: l}, lease.Renewal{Lease: lease.Lease{Key: "other", Token: 1}})
	}
	// In full and minimal (each renewed lease the request's, with the
	// answer's TTL and expiry), the same results.
	for _, minimal := range []bool{false, true} {
		out := make([]lease.RenewResult, len(results))
		if err := readRenewAnswer(appendRenewAnswer(nil, results, minimal), renewals, out); err != nil {
			t.Fatal(err)
		}
		for i, r := range results {
			if r.Err != nil {
				if !errors.Is(out[i].Err, lease.ErrNotHeld) {
					t.Errorf("minimal %v: result %d: read %v, want not held", minimal, i, out[i].Err)
				}
				continue
			}
			same(fmt.Sprintf("renew answer (minimal %v)", minimal), out[i].Lease, sent(r.Lease, true))
		}
	}
	h := &lease.HeldError{Key: "k", Owner: "ü<", Token: 9, Expires: time.Date(2026, 1, 2, 3, 4, 5, 6e6, time.UTC)}
	e, err := readError(appendError(nil, "held", "m\u2028", h))
	if err != nil || e.code != "held" || e.message != "m\u2028" || e.holder == nil {
		t.Fatalf("error: read %+v (%v)", e, err)
	}
	same("holder", *e.holder, lease.Lease{Key: h.Key, Owner: h.Owner, Token: h.Token, Expires: h.Expires})
}

// Reading.

const wireExp = `"expires_at":"2026-12-02T10:00:00.000Z"`

// leaseRead are lease bodies the reader must read: the server's own
// answers, and members it does not know, of any JSON value, in any order.
var leaseRead = []string{
	`{"key":"jobs/nightly","owner":"host-42","token":7,"id":"9f86d081884c7d659a2feaa0c55ad015","ttl_ms":30000,` + wireExp + `}`,
	`{"key":"a\u003cb","owner":"\u00e9","token":9007199254740992,` + wireExp + `}`,
	`{"key":"k","token":1,` + wireExp + `}`,
	`{"key":"k","token":1,` + wireExp + `,"x":{"y":[1,2.5e-3,-0,true,false,null,"\u00e9",{}]},"z":[]}`,
	`{"x":1,"key":"k","token":1,` + wireExp + `}`,
	`{"key":"k","token":1,` + wireExp + `,"id":""}`,
	`{"key":"k","token":1,` + wireExp + `,"id":"9F86D081884C7D659A2FEAA0C55AD015"}`,
	`{"key":"k","token":1,` + wireExp + `,"ttl_ms":86400000}`,
	`{"key":"k","token":1,"expires_at":"2026-12-02T10:00:00+05:30"}`,
	`{"key":"k","token":1,` + wireExp + `}` + "\n",
	` { "key" : "k" , "token" : 1 , ` + wireExp + ` } `,
}

// leaseRefused are lease bodies the reader must refuse although
// encoding/json reads them: it would read them another way than the
// reader could (a member named in another case, or repeated; null), or
// they nest deeper than the reader goes.
var leaseRefused = []string{
	`{"key":"k","key":"l","token":1,` + wireExp + `}`,
	`{"Key":"k","token":1,` + wireExp + `}`, `{"key":"k","Token":1,` + wireExp + `}`, `{"\u212aey":"k","token":1,` + wireExp + `}`,
	`{"key":"k","token":1,` + wireExp + `,"\u212aey":"l"}`, `{"key":"k","token":1,` + wireExp + `,"expireſ_at":"2026-12-02T11:00:00.000Z"}`,
	`{"key":"k","token":1,` + wireExp + `,"ID":"9f86d081884c7d659a2feaa0c55ad015"}`, `{"key":"k","token":1,` + wireExp + `,"ttl_MS":1}`,
	`{"key":"k","token":1,` + wireExp + `,"id":null}`, `{"key":"k","token":1,` + wireExp + `,"owner":null}`,
	`{"key":"k","token":1,` + wireExp + `,"x":` + strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2) + `}`,
}

// leaseBodies are lease bodies of every kind, near misses among them.
var leaseBodies = append(append(slices.Clone(leaseRead), leaseRefused...),
	`{"key":"k","owner":"o","token":1,"ttl_ms":1,"expires_at":"x","holder":{}}`,
	`{"KEY":"k","token":1}`, `{"token":-1}`, `{"token":1.5}`, `{"ttl_ms":9223372036854775808}`,
	`{"ttl_ms":null}`, `{"token":"1"}`, `null`, ``, `{}`,
	`{"key":"k","token":1,`+wireExp+`,"x":01}`, `{"key":"k","token":1,`+wireExp+`,"x":1.}`,
	`{"key":"k","token":1,`+wireExp+`,"x":-}`, `{"key":"k","token":1,`+wireExp+`,"x":[1,]}`,
	`{"key":"k","token":1,`+wireExp+`,"x":{"a"}}`, `{"key":"k","token":1,`+wireExp+`,"x":nul}`,
	`{"key":"k","token":1,`+wireExp+`,"x":"\x"}`, `{"key":"k","token":1,`+wireExp+`,"x":tru}`,
	`{"key":"k","token":1,`+wireExp+`,"x":1e}`, `{"key":"k","token":1,`+wireExp+`,"x":1e+}`, `{"key":"k","token":1,`+wireExp+`,"x":.5}`,
	`{"key":"k","token":1,`+wireExp+`,"id":"00000000000000000000000000000000"}`,
	`{"key":"k","token":1,`+wireExp+`,"ttl_ms":-1}`, `{"key":"k","token":1,`+wireExp+`,"ttl_ms":86400001}`,
	`{"key":"k","token":9007199254740993,`+wireExp+`}`, `{"key":"k","token":0,`+wireExp+`}`,
	`{"key":"","token":1,`+wireExp+`}`, `{"key":"a\u0000b","token":1,`+wireExp+`}`,
	`{"key":"\ud800","token":1,`+wireExp+`}`, "{\"key\":\"\xff\",\"token\":1,"+wireExp+`}`,
	`{"key":"k","token":1,"expires_at":""}`, `{"key":"k","token":1,`+wireExp+`} x`, `{"key":"k","token":1,`+wireExp,
	`[{"key":"k","token":1,`+wireExp+`}]`,
)

// readLeaseLikeUnmarshal is what the client made of a lease body with
// encoding/json: json.Unmarshal into LeaseJSON, then LeaseJSON.Lease.
func readLeaseLikeUnmarshal(body []byte) (lease.Lease, error) {
	var j LeaseJSON
	if err := json.Unmarshal(body, &j); err != nil {
		return lease.Lease{}, err
	}
	return j.Lease()
}

// sameLease reports whether a and b are the same lease, their expiries
// the same instant in the same zone (time.Parse makes a new zone for each
// offset it reads).
func sameLease(a, b lease.Lease) bool {
	return a.Key == b.Key && a.Owner == b.Owner && a.Token == b.Token && a.ID == b.ID && a.TTL == b.TTL && sameTime(a.Expires, b.Expires)
}

func sameTime(a, b time.Time) bool {
	if a.Location() == b.Location() {
		return a == b
	}
	an, ao := a.Zone()
	bn, bo := b.Zone()
	return a.Equal(b) && an == bn && ao == bo
}

// checkLeaseRead holds readLease to encoding/json's reading.
func checkLeaseRead(t *testing.T, body []byte) {
	t.Helper()
	got, err := readLease(body)
	if err != nil {
		return
	}
	want, werr := readLeaseLikeUnmarshal(body)
	switch {
	case werr != nil:
		t.Fatalf("%q: read as %+v; encoding/json refuses it: %v", body, got, werr)
	case !sameLease(got, want):
		t.Fatalf("%q: read as %+v; encoding/json reads %+v", body, got, want)
	}
}

func TestReadLeaseMatchesUnmarshal(t *testing.T) {
	for _, body := range append(leaseBodies, tricky...) {
		checkLeaseRead(t, []byte(body))
	}
	for _, body := range leaseRead {
		if _, err := readLease([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	for _, body := range leaseRefused {
		if _, err := readLeaseLikeUnmarshal([]byte(body)); err != nil {
			t.Errorf("%s: encoding/json refuses it too (%v): move it", body, err)
		}
		if l, err := readLease([]byte(body)); err == nil {
			t.Errorf("%s: read as %+v", body, l)
		}
	}
}

func FuzzReadLease(f *testing.F) {
	for _, body := range leaseBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkLeaseRead(t, body) })
}

// skip reads exactly the values json.Valid calls JSON, up to its depth.
func TestSkipMatchesValid(t *testing.T) {
	for _, v := range append(slices.Clone(tricky), leaseBodies...) {
		checkSkip(t, []byte(v))
	}
}

func FuzzSkip(f *testing.F) {
	for _, v := range tricky {
		f.Add([]byte(v))
	}
	f.Fuzz(checkSkip)
}

func checkSkip(t *testing.T, v []byte) {
	t.Helper()
	s := &scanner{b: v}
	err := s.skip(0)
	if err == nil {
		err = s.end()
	}
	deep := strings.Count(string(v), "[")+strings.Count(string(v), "{") > maxDepth
	if valid := json.Valid(v); (err == nil) != valid && !(valid && deep) {
		t.Fatalf("%q: skip says %v, json.Valid %v", v, err, valid)
	}
}

// scanRenewals are the renewals the answers below are for.
var scanRenewals = []lease.Renewal{
	{Lease: lease.Lease{Key: "jobs/a", Token: 7, ID: lease.ID{1}}, TTL: time.Second},
	{Lease: lease.Lease{Key: "ü/日本<&>", Token: 9007199254740992, ID: lease.ID{2}}, TTL: time.Second},
	{Lease: lease.Lease{Key: "k", Token: 1, ID: lease.ID{3}}, TTL: time.Second},
}

// renewRead are answers to scanRenewals the reader must read, and
// renewAnswers those and near misses of every kind.
var renewRead, renewAnswers = func() ([]string, []string) {
	const (
		id  = `"id":"9f86d081884c7d659a2feaa0c55ad015"`
		exp = `"expires_at":"2026-12-02T10:00:00.000Z"`
	)
	a := `{"lease":{"key":"jobs/a","owner":"host-42","token":7,` + id + `,"ttl_ms":30000,` + exp + `}}`
	b := `{"lease":{"key":"ü/日本\u003c\u0026\u003e","owner":"host-42","token":9007199254740992,` + id + `,"ttl_ms":1000,` + exp + `}}`
	c := `{"error":{"code":"not_held","message":"leasehttp: renew \"k\": lease not held"}}`
	ok := func(third string) string { return `{"results":[` + a + `,` + b + `,` + third + `]}` }
	lease3 := func(members string) string { return ok(`{"lease":{` + members + `}}`) }
	min3 := func(members string) string { return ok(`{` + members + `}`) }
	minimal := []string{ // the minimal answer's (Prefer: return=minimal)
		min3(`"ttl_ms":1000,` + exp),
		min3(exp + `,"ttl_ms":1000`),
		min3(`"ttl_ms":0,` + exp),
		min3(` "ttl_ms" : 1000 , "x":[1] , ` + exp),
		`{"results":[{"ttl_ms":30000,` + exp + `},{"ttl_ms":1,` + exp + `},` + c + `]}`,
	}
	read := []string{
		ok(c),
		lease3(`"key":"k","owner":"o","token":1,` + exp),
		lease3(`"key":"k","token":1,` + exp),
		lease3(`"key":"k","owner":"host-42","token":1,"id":"",` + exp),
		lease3(`"key":"k","owner":"o","token":1,"id":"9F86D081884C7D659A2FEAA0C55AD015",` + exp),
		lease3(`"expires_at":"2026-12-02T10:00:00.000Z","ttl_ms":0,"token":1,"owner":"o","key":"k"`),
		lease3(` "key" : "k" , "owner" : "o" , "token" : 1 , "expires_at" : "2026-12-02T10:00:00.000Z" `),
		lease3(`"k\u0065y":"\u006b","owner":"\u00e9\ud83d\ude00","token":1,` + exp),
		lease3(`"key":"k","owner":"\ud800","token":1,` + exp),
		lease3(`"key":"k","owner":"` + "\xff" + `","token":1,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"holder":{},` + exp),
		lease3(`"key":"k","owner":"o","token":1,"x":1,` + exp),
		lease3(`"key":"k","owner":"o","token":1,"ttl_ms":` + fmt.Sprint(lease.MaxTTL.Milliseconds()) + `,` + exp),
		ok(`{"error":{"code":"not_held","message":"m","detail":[1,{"x":null}]}}`),
		ok(`{"error":{"code":"not_held","message":"m"},"x":1}`),
		ok(`{"error":{"message":"m","code":"not_held"}}`),
		`{"results":[` + a + `,` + b + `,` + c + `],"x":1}`,
		`{"x":1,"results":[` + a + `,` + b + `,` + c + `]}`,
		"\t{ \"results\" :\n[ " + a + " ,\r" + b + " , " + c + " ] } ",
	}
	read = append(read, minimal...)
	answers := []string{
		ok(c),
		min3(`"ttl_ms":1000`), min3(exp), min3(`"ttl_ms":1000,` + exp + `,` + exp), min3(`"ttl_ms":1000,"ttl_ms":1000,` + exp),
		min3(`"ttl_ms":1000,` + exp + `,"lease":{"key":"k","owner":"o","token":1,` + exp + `}`),
		min3(`"lease":{"key":"k","owner":"o","token":1,` + exp + `},"ttl_ms":1000,` + exp),
		min3(`"ttl_ms":1000,` + exp + `,"error":{"code":"not_held","message":"m"}`),
		min3(`"error":{"code":"not_held","message":"m"},` + exp),
		min3(`"ttl_ms":-1,` + exp), min3(`"ttl_ms":1.5,` + exp), min3(`"ttl_ms":"1000",` + exp), min3(`"ttl_ms":null,` + exp),
		min3(`"ttl_ms":` + fmt.Sprint(lease.MaxTTL.Milliseconds()+1) + `,` + exp),
		min3(`"ttl_ms":1000,"expires_at":"2026-12-02T10:00:00Z"`), min3(`"ttl_ms":1000,"expires_at":"x"`),
		min3(`"ttl_ms":1000,"expires_at":null`), min3(`"TTL_MS":1000,` + exp), min3(`"ttl_ms":1000,"Expires_At":"2026-12-02T10:00:00.000Z"`),
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
		ok(`{"error":{"code":"not_held","message":"m","detail":[1,{"x":null}]}}`),
		ok(`{"error":{"code":"not_held","message":"m"},"x":1}`),
		ok(`{"error":{"code":"not_held","Message":"m"}}`),
		ok(`{"Error":{"code":"not_held","message":"m"}}`),
		ok(`{"error":null}`), ok(`{"lease":null}`), ok(`{}`), ok(`null`), ok(`[]`),
		`{"results":[` + a + `,` + b + `]}`,
		`{"results":[` + a + `,` + b + `,` + c + `,` + c + `]}`,
		`{"results":[]}`, `{"results":null}`, `{"results":{}}`, `{}`, `null`, ``, `[]`,
		`{"results":[` + a + `,` + b + `,` + c + `],"x":1}`,
		`{"x":1,"results":[` + a + `,` + b + `,` + c + `]}`,
		`{"Results":[` + a + `,` + b + `,` + c + `]}`,
		`{"results":[` + a + `,` + b + `,` + c + `],"results":[` + a + `,` + b + `,` + c + `]}`,
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
	return read, append(read, answers...)
}()

// renewAnswerLikeUnmarshal is what RenewBatch made of an answer with
// encoding/json: json.Unmarshal into renewBatchJSON, then the checks of
// each result.
func renewAnswerLikeUnmarshal(body []byte, renewals []lease.Renewal) ([]lease.RenewResult, error) {
	var answer renewBatchJSON
	if err := json.Unmarshal(body, &answer); err != nil {
		return nil, err
	}
	if len(answer.Results) != len(renewals) {
		return nil, fmt.Errorf("%d results for %d renewals", len(answer.Results), len(renewals))
	}
	out := make([]lease.RenewResult, len(renewals))
	for i, res := range answer.Results {
		key := renewals[i].Lease.Key
		minimal := res.TTLms != nil || res.ExpiresAt != nil
		switch {
		case btoi(res.Error != nil)+btoi(res.Lease != nil)+btoi(minimal) > 1:
			return nil, errors.New("more than one")
		case minimal:
			if res.TTLms == nil || res.ExpiresAt == nil {
				return nil, errors.New("ttl_ms or expires_at alone")
			}
			ttl, err := answerTTL(*res.TTLms)
			if err != nil {
				return nil, err
			}
			exp, err := time.Parse(time.RFC3339Nano, *res.ExpiresAt)
			if err != nil {
				return nil, err
			}
			out[i].Lease = renewals[i].Lease
			out[i].Lease.TTL, out[i].Lease.Expires = ttl, exp
		case res.Error != nil:
			if res.Error.Code != "not_held" {
				return nil, fmt.Errorf("unexpected answer %q", res.Error.Code)
			}
			out[i].Err = fmt.Errorf("leasehttp: renew %s: %w", quoteName(key), lease.ErrNotHeld)
		case res.Lease != nil:
			l, err := res.Lease.Lease()
			switch {
			case err != nil:
				return nil, err
			case l.Key != key || l.Token != renewals[i].Lease.Token:
				return nil, errors.New("another lease")
			}
			out[i].Lease = l
		default:
			return nil, errors.New("neither lease nor error")
		}
	}
	return out, nil
}

// checkRenewRead holds readRenewAnswer to encoding/json's reading.
func checkRenewRead(t *testing.T, body []byte) {
	t.Helper()
	got := make([]lease.RenewResult, len(scanRenewals))
	if err := readRenewAnswer(body, scanRenewals, got); err != nil {
		return
	}
	want, err := renewAnswerLikeUnmarshal(body, scanRenewals)
	if err != nil {
		t.Fatalf("%q: read; encoding/json's reading refuses it: %v", body, err)
	}
	for i := range got {
		g, w := got[i], want[i]
		switch {
		case (g.Err == nil) != (w.Err == nil),
			g.Err != nil && (g.Err.Error() != w.Err.Error() || !errors.Is(g.Err, lease.ErrNotHeld)),
			!sameLease(g.Lease, w.Lease):
			t.Fatalf("%q: result %d read as %+v (%v); encoding/json's reading is %+v (%v)", body, i, g.Lease, g.Err, w.Lease, w.Err)
		}
	}
}

func TestReadRenewAnswerMatchesUnmarshal(t *testing.T) {
	for _, body := range append(renewAnswers, tricky...) {
		checkRenewRead(t, []byte(body))
	}
	for _, body := range renewRead {
		if err := readRenewAnswer([]byte(body), scanRenewals, make([]lease.RenewResult, 3)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	// An answer holds as many results as there were renewals.
	four := append(slices.Clone(scanRenewals), scanRenewals[0])
	for _, body := range renewAnswers {
		if readRenewAnswer([]byte(body), scanRenewals, make([]lease.RenewResult, 3)) != nil {
			continue
		}
		for _, n := range []int{0, 1, 2, 4} {
			if readRenewAnswer([]byte(body), four[:n], make([]lease.RenewResult, n)) == nil {
				t.Fatalf("%q read as the answer to 3 renewals and to %d", body, n)
			}
		}
	}
}

func FuzzReadRenewAnswer(f *testing.F) {
	for _, body := range renewAnswers {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkRenewRead(t, body) })
}

// listBodies are pages as the server writes them, and near misses.
var listBodies = []string{
	`{"leases":[],"next":""}`,
	`{"leases":[{"key":"a","owner":"o","token":1,"expires_at":"2026-12-02T10:00:00.000Z"},{"key":"b","owner":"o","token":2,"ttl_ms":5,"expires_at":"2026-12-02T10:00:00.000Z"}],"next":"YWI"}`,
	`{"leases":[{"key":"a","token":1,"expires_at":"2026-12-02T10:00:00.000Z"}]}`,
	`{"next":"x","leases":[],"more":true}`, `{"leases":null,"next":""}`, `{"next":""}`, `{"leases":[],"next":null}`,
	`{"leases":[{}],"next":""}`, `{"leases":[null],"next":""}`, `{"leases":{},"next":""}`, `{"Leases":[],"next":""}`,
	`{"leases":[],"next":"","next":"x"}`, `{"leases":[],"next":1}`, `{"leases":[{"key":"a","token":0,"expires_at":"x"}]}`,
}

// checkListRead holds readList to encoding/json's reading.
func checkListRead(t *testing.T, body []byte) {
	t.Helper()
	got, err := readList(body)
	if err != nil {
		return
	}
	var want listJSON
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatalf("%q: read; json.Unmarshal refuses it: %v", body, err)
	}
	if got.Next != want.Next || len(got.Leases) != len(want.Leases) {
		t.Fatalf("%q: read %d leases, next %q; json.Unmarshal reads %d, next %q", body, len(got.Leases), got.Next, len(want.Leases), want.Next)
	}
	for i, j := range want.Leases {
		l, err := j.Lease()
		if err != nil || !sameLease(got.Leases[i], l) {
			t.Fatalf("%q: lease %d read as %+v; encoding/json reads %+v (%v)", body, i, got.Leases[i], l, err)
		}
	}
}

func TestReadListMatchesUnmarshal(t *testing.T) {
	for _, body := range append(slices.Clone(listBodies), tricky...) {
		checkListRead(t, []byte(body))
	}
	for _, body := range listBodies[:4] {
		if _, err := readList([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func FuzzReadList(f *testing.F) {
	for _, body := range listBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkListRead(t, body) })
}

// errorBodies are error answers as the server writes them, and near misses.
var errorBodies = []string{
	`{"error":{"code":"held","message":"m","holder":{"key":"k","owner":"o","token":7,"expires_at":"2026-12-02T10:00:00.000Z"}}}`,
	`{"error":{"code":"not_held","message":"leasehttp: \u003c"}}`,
	`{"error":{"code":"x","message":"m","retry":1},"trace":[]}`,
	`{"error":{"code":"held","message":"m","holder":null}}`, `{"error":{"code":"held","message":"m","holder":{}}}`,
	`{"error":{"code":"held","message":"m","holder":{"key":"k","owner":"o","token":0,"expires_at":"2026-12-02T10:00:00.000Z"}}}`,
	`{"error":{"code":"held","message":"m","holder":{"key":"k","token":1,"expires_at":"2026-12-02T10:00:00.000Z","key":"l"}}}`,
	`{"error":{"code":"held","message":"m","holder":[}}`,
	// A holder that fails a check (an empty key) before a member of the
	// wrong type: not of the shape, so not an answer encoding/json reads.
	`{"error":{"code":"held","message":"m","holder":{"key":"","token":"0"}}}`,
	`{"error":{"message":"m"}}`, `{"error":{"code":"held"}}`, `{"error":{"code":1}}`, `{"error":null}`, `{}`,
	`{"error":{"Code":"held","message":"m"}}`, `{"error":{"code":"held","code":"x"}}`, `<html>502</html>`, ``,
}

// checkErrorRead holds readError to encoding/json's reading.
func checkErrorRead(t *testing.T, body []byte) {
	t.Helper()
	got, err := readError(body)
	if err != nil {
		return
	}
	var want errorJSON
	if err := json.Unmarshal(body, &want); err != nil {
		t.Fatalf("%q: read; json.Unmarshal refuses it: %v", body, err)
	}
	w := want.Error
	if got.code != w.Code || got.message != w.Message {
		t.Fatalf("%q: read %+v; json.Unmarshal reads %+v", body, got, w)
	}
	// A holder is read if encoding/json's reading of it passes the checks.
	var l lease.Lease
	err = errors.New("no holder")
	if w.Holder != nil {
		l, err = w.Holder.Lease()
	}
	switch {
	case (got.holder == nil) != (err != nil):
		t.Fatalf("%q: holder read as %+v; encoding/json reads %+v (%v)", body, got.holder, l, err)
	case got.holder != nil && !sameLease(*got.holder, l):
		t.Fatalf("%q: holder read as %+v; encoding/json reads %+v", body, *got.holder, l)
	}
}

func TestReadErrorMatchesUnmarshal(t *testing.T) {
	for _, body := range append(slices.Clone(errorBodies), tricky...) {
		checkErrorRead(t, []byte(body))
	}
	for _, body := range errorBodies[:3] {
		if _, err := readError([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

func FuzzReadError(f *testing.F) {
	for _, body := range errorBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkErrorRead(t, body) })
}

func TestParseExpiresMatchesTimeParse(t *testing.T) {
	check := func(s string) {
		t.Helper()
		got, err := parseExpires([]byte(s))
		want, werr := time.Parse(time.RFC3339Nano, s)
		if (err == nil) != (werr == nil) || got != want {
			t.Fatalf("%q: parsed %v (%v); time.Parse reads %v (%v)", s, got, err, want, werr)
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
