package leasehttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/recipetest"
	"github.com/leasehq/lease/leasehttp"
)

// TestRecipes runs the recipe suite through a live server whose wait cap
// is 30 ms, so that every wait in it is re-sent many times: whichever way
// the server waits, the line must keep its order.
func TestRecipes(t *testing.T) {
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			var servers sync.Map // *leasehttp.Client → its *checkedServer
			recipetest.Run(t, func(t *testing.T) lease.Backend {
				srv, hs := startServer(t, be.new(t), leasehttp.WithMaxWait(30*time.Millisecond))
				c := newClient(t, hs.URL)
				servers.Store(c, srv)
				return c
			}, recipetest.Options{
				Waiting: func(_ context.Context, b lease.Backend, key string) (int, error) {
					srv, _ := servers.Load(b)
					return waitingAt(srv.(http.Handler), key)
				},
				CappedWaits: func(_ context.Context, b lease.Backend) (int, error) {
					srv, _ := servers.Load(b)
					st, err := statsAt(srv.(http.Handler), "")
					return int(st.AcquireRefusals), err
				},
			})
		})
	}
}

// serverStats is what the recipe suite reads of GET /v1/stats.
type serverStats struct {
	// AcquireRefusals counts acquires answered held, waits that ended at
	// the wait cap among them.
	AcquireRefusals uint64 `json:"acquire_refusals"`
	Waiting         []struct {
		Key     string
		Waiters int
	}
}

// statsAt returns srv's GET /v1/stats for prefix, asked in process.
func statsAt(srv http.Handler, prefix string) (serverStats, error) {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/stats?prefix="+url.QueryEscape(prefix), nil))
	var st serverStats
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != http.StatusOK {
		return serverStats{}, fmt.Errorf("/v1/stats: HTTP %d %s (%v)", rec.Code, rec.Body, err)
	}
	return st, nil
}

// waitingAt returns how many acquire requests for key wait at srv.
func waitingAt(srv http.Handler, key string) (int, error) {
	st, err := statsAt(srv, key)
	if err != nil {
		return 0, err
	}
	for _, w := range st.Waiting {
		if w.Key == key {
			return w.Waiters, nil
		}
	}
	return 0, nil
}
