package servebench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehq/lease/internal/testkit/benchutil"
)

// The fsync-floor row: the least a durable lease server behind net/http
// must do for an acquire+release pair, and nothing else. The acquisition's
// answer carries a token, which must be durable before it is sent (I1
// across crashes): the handler writes a record and waits for an fdatasync
// that covers it, shared with every acquisition that arrived meanwhile
// (group commit). A release needs no durability (lost in a crash, the lease
// is held until its TTL), so its handler answers at once. No JSON is
// decoded, no lease state kept, no goroutine hand-off, no timer: whatever
// lease serve adds to this row is its own cost, and a target this row
// misses is out of reach for any server on this HTTP stack and disk.

// floorRecord is the bytes per acquisition: about a lease record (key,
// token, expiry, ID, owner).
const floorRecord = 64

// floorServer is the fsync-floor row's server: POST …/acquire commits a
// record, anything else answers at once; both answer {} as http-noop does.
func floorServer(tb testing.TB) (*httptest.Server, *benchutil.GroupSync) {
	tb.Helper()
	g, err := benchutil.NewGroupSync(tb.TempDir(), floorRecord)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			if err := g.Commit(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	tb.Cleanup(func() {
		srv.Close()
		if err := g.Close(); err != nil {
			tb.Error(err)
		}
	})
	return srv, g
}

// TestFloorServerAnswers: the floor row's acquire waits for a sync and its
// release does not.
func TestFloorServerAnswers(t *testing.T) {
	srv, g := floorServer(t)
	post := func(path string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", path, resp.Status)
		}
	}
	for i := range 3 {
		post("/v1/leases/k/acquire")
		post("/v1/leases/k/release")
		if got := g.Syncs(); got != int64(i+1) {
			t.Fatalf("after %d pairs %d fdatasyncs, want %d", i+1, got, i+1)
		}
	}
}
