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
				Settle: 100 * time.Millisecond,
			})
		})
	}
}

// waitingAt returns how many acquire requests for key wait at srv, from
// its GET /v1/stats, asked in process.
func waitingAt(srv http.Handler, key string) (int, error) {
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/v1/stats?prefix="+url.QueryEscape(key), nil))
	var stats struct {
		Waiting []struct {
			Key     string
			Waiters int
		}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &stats); err != nil || rec.Code != http.StatusOK {
		return 0, fmt.Errorf("/v1/stats: HTTP %d %s (%v)", rec.Code, rec.Body, err)
	}
	for _, w := range stats.Waiting {
		if w.Key == key {
			return w.Waiters, nil
		}
	}
	return 0, nil
}
