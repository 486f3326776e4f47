package leasehttp

import (
	"net/http"
	"strconv"
	"time"

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
	acquisitions outcomes // acquired, held, error
	renewals     outcomes // renewed, not_held, error
	releases     outcomes // released, not_held, error
	expirations  prometheus.Counter
	active       prometheus.Gauge
	waiters      prometheus.Gauge
	watchers     prometheus.Gauge
	duration     *prometheus.HistogramVec
}

// outcomes are the three series of one operation's counter, looked up once:
// finding a series by its label value hashes the value and takes a lock,
// on every request.
type outcomes struct {
	done    prometheus.Counter // acquired, renewed, released
	refused prometheus.Counter // held, not_held
	failed  prometheus.Counter // error
}

// newOutcomes also makes the series exist from the start, so that rate()
// and absent() alerts work before the first event.
func newOutcomes(v *prometheus.CounterVec, done, refused string) outcomes {
	return outcomes{v.WithLabelValues(done), v.WithLabelValues(refused), v.WithLabelValues(resultError)}
}

// routeDuration observes the request durations of one route.
type routeDuration struct {
	byCode prometheus.ObserverVec // the histogram curried with this route
	ok     prometheus.Observer    // its series for code 200, the common answer; nil for none
}

func (m *metrics) routeDuration(route string, okExpected bool) routeDuration {
	d := routeDuration{byCode: m.duration.MustCurryWith(prometheus.Labels{"route": route})}
	if okExpected {
		d.ok = d.byCode.WithLabelValues("200")
	}
	return d
}

func (d routeDuration) observe(status int, dur time.Duration) {
	o := d.ok
	if status != http.StatusOK || o == nil {
		o = d.byCode.WithLabelValues(strconv.Itoa(status))
	}
	o.Observe(dur.Seconds())
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	acquisitions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "lease", Name: "acquisitions_total",
		Help: "Acquire requests answered by the backend, by result: acquired, held (also a wait that ended without the lease) or error.",
	}, []string{"result"})
	renewals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "lease", Name: "renewals_total",
		Help: "Renew requests answered by the backend, by result: renewed, not_held or error.",
	}, []string{"result"})
	releases := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "lease", Name: "releases_total",
		Help: "Release requests answered by the backend, by result: released, not_held or error.",
	}, []string{"result"})
	m := &metrics{
		acquisitions: newOutcomes(acquisitions, resultAcquired, resultHeld),
		renewals:     newOutcomes(renewals, resultRenewed, resultNotHeld),
		releases:     newOutcomes(releases, resultReleased, resultNotHeld),
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
		watchers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "lease", Name: "watchers",
			Help: "Watch streams (GET /v1/watch) now open.",
		}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "lease", Name: "http_request_duration_seconds",
			Help: "Time to answer HTTP requests, by route pattern and status code; long polls count their wait, watch streams their whole length.",
			// 0.5 ms to 30 s: a loopback round trip up to the longest default wait.
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 13),
		}, []string{"route", "code"}),
	}
	for _, c := range []prometheus.Collector{acquisitions, renewals, releases, m.expirations, m.active, m.waiters, m.watchers, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
