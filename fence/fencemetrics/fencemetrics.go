// Package fencemetrics counts what a fencing guard answers, as the
// Prometheus counter fence_writes_total: writes accepted, late writes
// rejected (stale tokens) and checks that failed otherwise. A rejected write
// is a holder writing after its lease was lost — worth an alert, as
// deploy/prometheus/lease-alerts.yml has.
//
// It is a package of its own so that fence, and every guard beside it,
// needs nothing beyond the standard library: only a program that imports
// fencemetrics links client_golang. It works with any guard: Guard wraps a
// fence.Guard (the in-memory guard, fence.Middleware's), and Observe takes
// the error of any other guard's call (pgfence and sqlfence Check,
// redisfence Set, UpdateRow).
package fencemetrics

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/prometheus/client_golang/prometheus"
)

// MetricName is the counter's name.
const MetricName = "fence_writes_total"

// The values of the result label.
const (
	ResultAccepted = "accepted" // the guard admitted the token
	ResultRejected = "rejected" // a late write: the token was stale (lease.ErrStaleToken)
	ResultError    = "error"    // the check, or the guarded write, failed otherwise
)

// Counter counts one guard's answers. It is a prometheus.Collector: register
// it with a prometheus.Registerer. Its methods are safe for concurrent use.
type Counter struct {
	vec                        *prometheus.CounterVec
	accepted, rejected, failed prometheus.Counter
}

// New returns the counter of the guard named guard, the value of its guard
// label: a fixed name for the resource kind it protects ("orders-db"), never
// a per-resource name, so that the number of series stays fixed. Several
// guards may be counted in one registry under different names. guard must
// be 1 to 128 bytes of valid UTF-8; the error matches lease.ErrInvalid.
func New(guard string) (*Counter, error) {
	if guard == "" || len(guard) > 128 || !utf8.ValidString(guard) {
		return nil, fmt.Errorf("%w: fencemetrics: guard name %q must be 1 to 128 bytes of UTF-8", lease.ErrInvalid, guard)
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        MetricName,
		Help:        "Writes a fencing guard was asked to admit, by result: accepted, rejected (a late write with a stale token, refused) or error.",
		ConstLabels: prometheus.Labels{"guard": guard},
	}, []string{"result"})
	// All three series exist from the start, so that rate() and absent()
	// work before the first rejection.
	return &Counter{
		vec:      vec,
		accepted: vec.WithLabelValues(ResultAccepted),
		rejected: vec.WithLabelValues(ResultRejected),
		failed:   vec.WithLabelValues(ResultError),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *Counter) Describe(ch chan<- *prometheus.Desc) { c.vec.Describe(ch) }

// Collect implements prometheus.Collector.
func (c *Counter) Collect(ch chan<- prometheus.Metric) { c.vec.Collect(ch) }

// Observe counts the answer of one guarded write — nil: accepted; an error
// matching lease.ErrStaleToken: rejected; any other error: error — and
// returns err unchanged, so that a call can be wrapped in place:
//
//	err := counter.Observe(guard.Check(ctx, tx, resource, token))
func (c *Counter) Observe(err error) error {
	switch {
	case err == nil:
		c.accepted.Inc()
	case errors.Is(err, lease.ErrStaleToken):
		c.rejected.Inc()
	default:
		c.failed.Inc()
	}
	return err
}

// Guard returns g with each Check counted. It answers exactly as g does.
// Given a nil g, it returns a guard whose every Check fails, matching
// lease.ErrInvalid and counted as an error, and runs no write.
func (c *Counter) Guard(g fence.Guard) fence.Guard { return counted{g: g, c: c} }

type counted struct {
	g fence.Guard
	c *Counter
}

func (cg counted) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	if cg.g == nil {
		// Not a nil-pointer panic in the caller's request, and not a
		// write let through unguarded.
		return cg.c.Observe(fmt.Errorf("%w: fencemetrics: Guard was given a nil guard", lease.ErrInvalid))
	}
	return cg.c.Observe(cg.g.Check(ctx, resource, token, write))
}
