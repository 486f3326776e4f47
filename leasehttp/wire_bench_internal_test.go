package leasehttp

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/leasehq/lease"
)

// The wire codec's work on the hot paths, without the network: each op is
// one body written by its writer and read by its reader, as the client and
// the server do.

// discardWriter is a ResponseWriter that keeps nothing but the last answer's
// body.
type discardWriter struct {
	h    http.Header
	body []byte
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(int)     { w.body = w.body[:0] }
func (w *discardWriter) Write(p []byte) (int, error) {
	w.body = append(w.body, p...)
	return len(p), nil
}

func benchLeases(n int) ([]lease.RenewResult, []lease.Renewal) {
	exp := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	var results []lease.RenewResult
	var renewals []lease.Renewal
	for i := range n {
		l := lease.Lease{Key: "bench/" + strconv.Itoa(i), Owner: "bench-owner", Token: lease.Token(i + 1), ID: lease.NewID(), TTL: time.Hour, Expires: exp}
		results = append(results, lease.RenewResult{Lease: l})
		renewals = append(renewals, lease.Renewal{Lease: l, TTL: time.Hour})
	}
	return results, renewals
}

// BenchmarkWireRenewBatch: POST /v1/renew of 256 leases, the request
// written and read, the answer written and read: in full and minimal
// (Prefer: return=minimal, what the Go client asks for).
func BenchmarkWireRenewBatch(b *testing.B) {
	for _, answer := range []struct {
		name    string
		minimal bool
	}{{"full", false}, {"minimal", true}} {
		b.Run(answer.name, func(b *testing.B) {
			results, renewals := benchLeases(256)
			out := make([]lease.RenewResult, len(renewals))
			w := &discardWriter{h: http.Header{}}
			for b.Loop() {
				body := appendRenewBatchRequest(nil, renewals)
				r, _ := http.NewRequest("POST", "/v1/renew", bytes.NewReader(body))
				r.Header.Set("Content-Type", "application/json")
				if _, err := decodeRenewBatch(w, r); err != nil {
					b.Fatal(err)
				}
				writeAppended(w, http.StatusOK, func(b []byte) []byte { return appendRenewAnswer(b, results, answer.minimal) })
				if err := readRenewAnswer(w.body, renewals, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWireRenew: POST /v1/leases/{key}/renew, the request written and
// read, the answer written and read.
func BenchmarkWireRenew(b *testing.B) {
	results, _ := benchLeases(1)
	l := results[0].Lease
	w := &discardWriter{h: http.Header{}}
	for b.Loop() {
		body := appendRenewRequest(nil, l, time.Hour, false)
		r, _ := http.NewRequest("POST", "/v1/leases/k/renew", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if _, err := decodeRenew(w, r); err != nil {
			b.Fatal(err)
		}
		writeLease(w, l, true)
		if _, err := decodeLease("renew", l.Key, &response{status: 200, body: w.body}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWireAcquireRelease: an acquire and a release, each request
// written and read and each answer written and read.
func BenchmarkWireAcquireRelease(b *testing.B) {
	results, _ := benchLeases(1)
	l := results[0].Lease
	w := &discardWriter{h: http.Header{}}
	for b.Loop() {
		body := appendAcquireRequest(nil, "bench-owner", time.Hour, 0, lease.ID{}, false)
		r, _ := http.NewRequest("POST", "/v1/leases/k/acquire", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if _, err := decodeAcquire(w, r, 0); err != nil {
			b.Fatal(err)
		}
		writeLease(w, l, true)
		if _, err := decodeLease("acquire", l.Key, &response{status: 200, body: w.body}); err != nil {
			b.Fatal(err)
		}
		body = appendReleaseRequest(nil, l)
		r, _ = http.NewRequest("POST", "/v1/leases/k/release", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if _, err := decodeRelease(w, r); err != nil {
			b.Fatal(err)
		}
		writeBody(w, http.StatusOK, emptyObject)
	}
}

// BenchmarkWireHeld: a held answer, written and read.
func BenchmarkWireHeld(b *testing.B) {
	he := &lease.HeldError{Key: "bench/0", Owner: "bench-owner", Token: 7, Expires: time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)}
	w := &discardWriter{h: http.Header{}}
	for b.Loop() {
		writeAppended(w, http.StatusConflict, func(b []byte) []byte { return appendError(b, "held", he.Error(), he) })
		if err := answerError("acquire", he.Key, &response{status: http.StatusConflict, body: w.body}); !errors.Is(err, lease.ErrHeld) {
			b.Fatal(err)
		}
	}
}

// BenchmarkWireRenewBatchParts: the four parts of BenchmarkWireRenewBatch
// on their own.
func BenchmarkWireRenewBatchParts(b *testing.B) {
	results, renewals := benchLeases(256)
	request := appendRenewBatchRequest(nil, renewals)
	answer := appendRenewAnswer(nil, results, false)
	w := &discardWriter{h: http.Header{}}
	b.Run("write-request", func(b *testing.B) {
		for b.Loop() {
			appendRenewBatchRequest(nil, renewals)
		}
	})
	b.Run("read-request", func(b *testing.B) {
		for b.Loop() {
			r, _ := http.NewRequest("POST", "/v1/renew", bytes.NewReader(request))
			r.Header.Set("Content-Type", "application/json")
			if _, err := decodeRenewBatch(w, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write-answer", func(b *testing.B) {
		for b.Loop() {
			writeAppended(w, http.StatusOK, func(b []byte) []byte { return appendRenewAnswer(b, results, false) })
		}
	})
	b.Run("read-answer-encoding-json", func(b *testing.B) { // what the codec saves: the reference reading
		for b.Loop() {
			if _, err := renewAnswerLikeUnmarshal(answer, renewals); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write-answer-encoding-json", func(b *testing.B) {
		for b.Loop() {
			writeJSON(w, http.StatusOK, marshalRenewAnswer(results))
		}
	})
	b.Run("read-answer", func(b *testing.B) {
		out := make([]lease.RenewResult, len(renewals))
		for b.Loop() {
			if err := readRenewAnswer(answer, renewals, out); err != nil {
				b.Fatal(err)
			}
		}
	})
}
