package leasehttp

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Results of the lease operations, the values of the "result" label.
const (
	resultAcquired = "acquired"
	resultHeld     = "held"
	resultRenewed  = "renewed"
	resultReleased = "released"
	resultNotHeld  = "not_held"
	resultError    = "error"
)

// metrics are the server's Prometheus metrics. No label carries a key,
// owner or token: label values are a few fixed words, the route pattern
// and the HTTP status, so the number of series stays fixed however many
// keys there are.
type metrics struct {
	acquisitions *prometheus.CounterVec
	renewals     *prometheus.CounterVec
	releases     *prometheus.CounterVec
	expirations  prometheus.Counter
	active       prometheus.Gauge
	waiters      prometheus.Gauge
	duration     *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "lease", Name: "acquisitions_total",
			Help: "Acquire requests answered by the backend, by result: acquired, held (also a wait that ended without the lease) or error.",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "lease", Name: "renewals_total",
			Help: "Renew requests answered by the backend, by result: renewed, not_held or error.",
		}, []string{"result"}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "lease", Name: "releases_total",
			Help: "Release requests answered by the backend, by result: released, not_held or error.",
		}, []string{"result"}),
		expirations: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "lease", Name: "expirations_total",
			Help: "Leases granted or renewed through this server that expired without a release: holders that stopped renewing.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "lease", Name: "active_leases",
			Help: "Leases granted or renewed through this server and neither released nor expired (approximate: judged on this server's clock).",
		}),
		waiters: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "lease", Name: "waiters",
			Help: "Acquire requests now waiting (wait_ms) for a held key.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "lease", Name: "http_request_duration_seconds",
			Help: "Time to answer HTTP requests, by route pattern and status code; long polls count their wait.",
			// 0.5 ms to 30 s: a loopback round trip up to the longest default wait.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 13),
		}, []string{"route", "code"}),
	}
	for _, c := range []prometheus.Collector{m.acquisitions, m.renewals, m.releases, m.expirations, m.active, m.waiters, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Series that exist from the start make rate() and absent() alerts work
	// before the first event.
	for _, r := range []string{resultAcquired, resultHeld, resultError} {
		m.acquisitions.WithLabelValues(r)
	}
	for _, r := range []string{resultRenewed, resultNotHeld, resultError} {
		m.renewals.WithLabelValues(r)
	}
	for _, r := range []string{resultReleased, resultNotHeld, resultError} {
		m.releases.WithLabelValues(r)
	}
	return m, nil
}
