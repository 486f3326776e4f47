package leasehttp

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// pooledAnswer is an answer as roundTrip makes it: its body in a buffer
// taken from the pool, which release gives back (and then forgets).
func pooledAnswer(status int, body string) *response {
	buf := getBuf()
	*buf = append((*buf)[:0], body...)
	return &response{status: status, body: *buf, buf: buf}
}

func newInternalClient(t *testing.T, urls string) *Client {
	t.Helper()
	c, err := NewClient(urls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRetryGivesBackTheAnswersItAsksAgainAfter: a 503 that retry asks again
// after is an answer nobody reads again; its buffer goes back to the pool
// rather than to the garbage collector (one buffer per retried 503, of the
// size of the largest answer the pool has served).
func TestRetryGivesBackTheAnswersItAsksAgainAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newInternalClient(t, "http://127.0.0.1:1")
		var sent []*response
		resp, err, _ := c.retry(context.Background(), true, func() (*response, error) {
			r := pooledAnswer(http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"m"}}`)
			if len(sent) == 2 {
				r = pooledAnswer(http.StatusOK, `{}`)
			}
			sent = append(sent, r)
			return r, nil
		})
		if err != nil || resp != sent[len(sent)-1] || resp.status != http.StatusOK {
			t.Fatalf("retry = %+v, %v; want the third answer, 200", resp, err)
		}
		if resp.buf == nil {
			t.Fatal("the answer retry returned was given back: its caller reads it")
		}
		for i, r := range sent[:len(sent)-1] {
			if r.buf != nil {
				t.Errorf("answer %d (503, asked again after) was not given back to the pool", i+1)
			}
		}
	})
}

// TestHedgeGivesBackTheLosersAnswer: of a hedged renewal, the request not
// taken is cancelled, but an answer it had read by then (both came at
// once) is one nobody reads: its buffer goes back to the pool too.
func TestHedgeGivesBackTheLosersAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newInternalClient(t, "http://127.0.0.1:1,http://127.0.0.1:2")
		var (
			mu    sync.Mutex
			calls int
			slow  *response
		)
		answer := make(chan struct{})
		resp, err := c.hedged(context.Background(), 3*time.Second, func(context.Context) func() (*response, error) {
			return func() (*response, error) {
				mu.Lock()
				calls++
				first := calls == 1
				mu.Unlock()
				if !first {
					return pooledAnswer(http.StatusOK, `{"hedge":1}`), nil
				}
				<-answer // read just as the hedge won
				mu.Lock()
				defer mu.Unlock()
				slow = pooledAnswer(http.StatusOK, `{"first":1}`)
				return slow, nil
			}
		})
		if err != nil || string(resp.body) != `{"hedge":1}` {
			t.Fatalf("hedged = %+v, %v; want the hedge's answer", resp, err)
		}
		close(answer)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if slow == nil {
			t.Fatal("the first request never answered")
		}
		if slow.buf != nil {
			t.Error("the losing request's answer was not given back to the pool")
		}
		if resp.buf == nil {
			t.Error("the winning answer was given back: its caller reads it")
		}
	})
}
