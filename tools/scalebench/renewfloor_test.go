package scalebench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/benchutil"
	"github.com/leasehq/lease/leasehttp"
)

// The floor-http-fsync row: the least any server must do for a batch of
// renewals over HTTP with fsync, and nothing else. Each request is one POST
// carrying the bytes leasehttp.Client sends for the caller's 256 renewals;
// the handler reads the body, writes a record of floorRenewRecord bytes and
// waits for an fdatasync that covers it, shared with every request that
// arrived meanwhile (group commit, as boltstore's), in the store's own
// directory; then it answers the bytes the real server answered to the
// same request, read whole by the caller. Nothing is decoded or encoded, no
// lease state is kept: whatever the serve-bolt-batch256 row adds to this
// one is lease serve's own cost, and a target this row misses is out of
// reach for any server on this HTTP stack and disk.

// floorRenewRecord is what one request writes to its log: 16 bytes a
// renewal (which lease, its new expiry), the least a durable record of 256
// renewals holds.
const floorRenewRecord = 16 * leasesPerRenew

// renewWire is POST /v1/renew's body as leasehttp.Client writes it.
type renewWire struct {
	Renewals []renewWireItem `json:"renewals"`
}

type renewWireItem struct {
	Key   string      `json:"key"`
	ID    string      `json:"id"`
	Token lease.Token `json:"token"`
	TTLms int64       `json:"ttl_ms"`
}

// renewBody is the body of POST /v1/renew for renewals.
func renewBody(renewals []lease.Renewal) ([]byte, error) {
	var w renewWire
	for _, r := range renewals {
		w.Renewals = append(w.Renewals, renewWireItem{Key: r.Lease.Key, ID: r.Lease.ID.Reveal(), Token: r.Lease.Token, TTLms: r.TTL.Milliseconds()})
	}
	return json.Marshal(w)
}

// floorRenew starts the floor row's server, its log in dir, and returns the
// row's renew. Its answer is the one the real server at url gives to caller
// 0's batch, asked here once.
func floorRenew(tb testing.TB, url, dir string, batches [][]lease.Renewal) func(w int) (int, error) {
	tb.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 256 // as leasehttp.Client's own
	tb.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	bodies := make([][]byte, len(batches))
	for w, batch := range batches {
		var err error
		if bodies[w], err = renewBody(batch); err != nil {
			tb.Fatal(err)
		}
	}
	var answer bytes.Buffer
	if _, err := postRenew(hc, url, bodies[0], &answer); err != nil {
		tb.Fatal(err)
	}
	srv, _ := floorRenewServer(tb, dir, answer.Bytes())
	return func(w int) (int, error) {
		n, err := postRenew(hc, srv.URL, bodies[w], io.Discard)
		switch {
		case err != nil:
			return 0, err
		case n != int64(answer.Len()):
			return 0, fmt.Errorf("floor answered %d bytes, want %d", n, answer.Len())
		}
		return len(batches[w]), nil
	}
}

// postRenew posts body to url's /v1/renew and copies the answer, which must
// be a 200, to dst.
func postRenew(hc *http.Client, url string, body []byte, dst io.Writer) (int64, error) {
	req, err := http.NewRequest(http.MethodPost, url+"/v1/renew", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return 0, fmt.Errorf("POST %s/v1/renew: %s: %s", url, resp.Status, msg)
	}
	return io.Copy(dst, resp.Body)
}

// floorRenewServer is the floor row's server: every request is read, waits
// for a record's fdatasync, and is answered answer.
func floorRenewServer(tb testing.TB, dir string, answer []byte) (*httptest.Server, *benchutil.GroupSync) {
	tb.Helper()
	g, err := benchutil.NewGroupSync(dir, floorRenewRecord)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := g.Commit(); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json") // the headers of leasehttp's answers
		h.Set("Cache-Control", "no-store")
		h.Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(answer)
	}))
	tb.Cleanup(func() {
		srv.Close()
		if err := g.Close(); err != nil {
			tb.Error(err)
		}
	})
	return srv, g
}

// TestRenewFloorBody: the floor row sends the bytes leasehttp.Client sends
// for the same renewals.
func TestRenewFloorBody(t *testing.T) {
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case bodies <- b:
		default:
		}
		http.Error(w, `{"error":{"code":"invalid","message":"captured"}}`, http.StatusBadRequest)
	}))
	defer srv.Close()
	hc, err := leasehttp.NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	var renewals []lease.Renewal
	for i := range 3 {
		renewals = append(renewals, lease.Renewal{
			Lease: lease.Lease{Key: idleKey(i), Token: lease.Token(i + 1), ID: lease.NewID()},
			TTL:   setupTTL,
		})
	}
	if _, err := hc.RenewBatch(context.Background(), renewals); err == nil {
		t.Fatal("the capturing server's 400 was not an error")
	}
	want, err := renewBody(renewals)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-bodies; !bytes.Equal(got, want) {
		t.Errorf("leasehttp.Client sent\n%s\nthe floor sends\n%s", got, want)
	}
}

// TestFloorRenewServer: every request to the floor row's server waits for
// an fdatasync of its own (one client, so none is shared) and is answered
// the given bytes whole.
func TestFloorRenewServer(t *testing.T) {
	answer := bytes.Repeat([]byte("x"), 40<<10)
	srv, g := floorRenewServer(t, t.TempDir(), answer)
	for i := range 3 {
		var got bytes.Buffer
		if _, err := postRenew(srv.Client(), srv.URL, []byte(`{"renewals":[]}`), &got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), answer) {
			t.Fatalf("answered %d bytes, want the %d given", got.Len(), len(answer))
		}
		if n := g.Syncs(); n != int64(i+1) {
			t.Fatalf("after %d requests %d fdatasyncs, want %d", i+1, n, i+1)
		}
	}
}
