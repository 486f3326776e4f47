package fence_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
	"github.com/leasehq/lease/memstore"
)

// A service guards its writes with Middleware: the handler runs only for a
// token not older than the newest one accepted, atomically with the check.
func ExampleMiddleware() {
	var mu sync.Mutex
	reports := map[string]string{}

	guard, err := fence.Middleware(fence.NewMemory(fence.AtLeast),
		func(r *http.Request) (string, error) { return "report/" + r.PathValue("name"), nil })
	if err != nil {
		fmt.Println(err)
		return
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /reports/{name}", guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest) // >= 400: the token is not recorded
			return
		}
		mu.Lock()
		defer mu.Unlock()
		reports[r.PathValue("name")] = string(body)
		w.WriteHeader(http.StatusNoContent)
	})))

	write := func(token, body string) {
		req := httptest.NewRequest(http.MethodPut, "/reports/nightly", strings.NewReader(body))
		if token != "" {
			req.Header.Set(fence.TokenHeader, token)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Println(strings.TrimSpace(fmt.Sprintf("token %q: %d %s", token, rec.Code, rec.Body.String())))
	}
	write("1", "by worker a")
	write("2", "by worker b")
	write("1", "late write by worker a")
	write("", "no token")
	fmt.Println("nightly:", reports["nightly"])
	// Output:
	// token "1": 204
	// token "2": 204
	// token "1": 409 {"error":{"code":"stale_token","message":"fence: stale token 1 for \"report/nightly\": highest accepted is 2 (mode at-least)","resource":"report/nightly","token":1,"highest":2}}
	// token "": 400 {"error":{"code":"invalid","message":"lease: invalid argument: fence: request has no Fencing-Token header"}}
	// nightly: by worker b
}

// A worker sends its writes through a Transport made from its Hold, which
// stamps the lease's token on each request and refuses to send once the
// lease is lost or released.
func ExampleNewHoldTransport() {
	ctx := context.Background()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "got %s: %s", fence.TokenHeader, r.Header.Get(fence.TokenHeader))
	}))
	defer srv.Close()

	store, err := memstore.New()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer store.Close()
	client, err := lease.NewClient(store, lease.WithOwner("worker-a"))
	if err != nil {
		fmt.Println(err)
		return
	}
	hold, err := client.TryAcquire(ctx, "nightly-report", 10*time.Second)
	if err != nil {
		fmt.Println(err)
		return
	}
	tr, err := fence.NewHoldTransport(hold, srv.Client().Transport)
	if err != nil {
		fmt.Println(err)
		return
	}
	hc := &http.Client{Transport: tr}

	resp, err := hc.Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))

	if err := hold.Release(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_, err = hc.Post(srv.URL, "application/json", strings.NewReader(`{}`))
	fmt.Println("after release, refused:", errors.Is(err, lease.ErrReleased))
	// Output:
	// got Fencing-Token: 1
	// after release, refused: true
}
