package leasehttp

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehq/lease"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// maxWaitingKeys bounds the keys one stats answer lists in "waiting", so
// that a flood of waiters on distinct keys cannot make the answer huge.
const maxWaitingKeys = 1000

// statsJSON is the answer of GET /v1/stats: the server's own figures, as
// its Prometheus metrics count them (the counters since the process
// started), and the keys under the prefix with acquire requests waiting at
// this server.
type statsJSON struct {
	Now             string        `json:"now"`
	Acquisitions    uint64        `json:"acquisitions"`
	AcquireRefusals uint64        `json:"acquire_refusals"`
	AcquireErrors   uint64        `json:"acquire_errors"`
	Renewals        uint64        `json:"renewals"`
	RenewFailures   uint64        `json:"renew_failures"`
	Releases        uint64        `json:"releases"`
	Expirations     uint64        `json:"expirations"`
	ActiveLeases    int64         `json:"active_leases"`
	Waiters         int64         `json:"waiters"`
	Watchers        int64         `json:"watchers"`
	Waiting         []waitingJSON `json:"waiting"`
}

// waitingJSON is one key with acquire requests waiting for it.
type waitingJSON struct {
	Key     string `json:"key"`
	Waiters int    `json:"waiters"`
}

// waitingKeys counts, per key, the acquire requests waiting at this server.
type waitingKeys struct {
	mu sync.Mutex
	m  map[string]int
}

func (w *waitingKeys) add(key string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[string]int{}
	}
	if w.m[key] += n; w.m[key] <= 0 {
		delete(w.m, key)
	}
}

// under returns the counts of the keys that start with one of prefixes, in
// key order, at most maxWaitingKeys of them (the first in key order).
func (w *waitingKeys) under(prefixes []string) []waitingJSON {
	out := []waitingJSON{}
	w.mu.Lock()
	for k, n := range w.m {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				out = append(out, waitingJSON{Key: k, Waiters: n})
				break
			}
		}
	}
	w.mu.Unlock()
	slices.SortFunc(out, func(a, b waitingJSON) int { return strings.Compare(a.Key, b.Key) })
	return out[:min(len(out), maxWaitingKeys)]
}

// statsPrefix reads the query of GET /v1/stats: at most one prefix, no
// other parameters.
func statsPrefix(r *http.Request) (string, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return "", badRequest("query string: %v", err)
	}
	for name := range q {
		if name != "prefix" {
			return "", badRequest("unknown query parameter %s", quoteName(name))
		}
	}
	ps := q["prefix"]
	if len(ps) > 1 {
		return "", badRequest("query parameter \"prefix\" given %d times", len(ps))
	}
	if len(ps) == 0 || ps[0] == "" {
		return "", nil
	}
	if err := lease.ValidateKey(ps[0]); err != nil {
		return "", badRequest("prefix: %v", strings.TrimPrefix(err.Error(), lease.ErrInvalid.Error()+": "))
	}
	return ps[0], nil
}

// handleStats answers the server's figures to any credential: they are the
// numbers /metrics publishes without one. The waiting keys are narrowed to
// those the credential covers under ?prefix=, as a list is; a credential
// that covers none of them gets an empty "waiting".
func (s *Server) handleStats(w *responseWriter, r *http.Request) {
	c, ok := s.authorize(w, r)
	if !ok {
		return
	}
	prefix, err := statsPrefix(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	m := s.metrics
	out := statsJSON{
		Now:             time.Now().UTC().Format(expiresLayout),
		Acquisitions:    counterValue(m.acquisitions.done),
		AcquireRefusals: counterValue(m.acquisitions.refused),
		AcquireErrors:   counterValue(m.acquisitions.failed),
		Renewals:        counterValue(m.renewals.done),
		RenewFailures:   counterValue(m.renewals.refused) + counterValue(m.renewals.failed),
		Releases:        counterValue(m.releases.done),
		Expirations:     counterValue(m.expirations),
		ActiveLeases:    gaugeValue(m.active),
		Waiters:         gaugeValue(m.waiters),
		Watchers:        gaugeValue(m.watchers),
		Waiting:         s.waiting.under(c.listPrefixes(prefix)),
	}
	writeJSON(w, http.StatusOK, out)
}

// counterValue reads a counter the server keeps (whole counts only).
func counterValue(c prometheus.Counter) uint64 {
	var m dto.Metric
	if c.Write(&m) != nil {
		return 0 // a plain counter always writes
	}
	return uint64(m.GetCounter().GetValue())
}

// gaugeValue reads a gauge the server keeps (whole counts only).
func gaugeValue(g prometheus.Gauge) int64 {
	var m dto.Metric
	if g.Write(&m) != nil {
		return 0 // a plain gauge always writes
	}
	return int64(m.GetGauge().GetValue())
}
