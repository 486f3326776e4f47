package etcdstore_test

import (
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
)

// TestIdleStoreKeepsItsConnection leaves a Store idle, connected to etcd
// through a proxy that counts the connections it carries, for longer than
// etcd lets a client ping a connection with no RPC in flight: etcd's
// servers enforce gRPC keep-alive with PermitWithoutStream false, so the
// third such ping within two hours closes the connection (GOAWAY
// "too_many_pings"). The Store must keep its one connection. Its client
// used to ping every 10 s whether or not a request was in flight: etcd
// closed the connection about 40 s into every idle spell, the client
// reconnected, logged an ERROR through grpclog each time, and doubled its
// ping interval, so that the longer a Store had been idle now and then,
// the later it found a member whose link had gone silent.
func TestIdleStoreKeepsItsConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("needs etcd and a minute of real time")
	}
	t.Parallel() // a minute of waiting, beside the package's other tests
	eps := etcdtest.Start(t)
	px := newCountingProxy(t, strings.TrimPrefix(eps[0], "http://"))
	s := open(t, []string{"http://" + px.addr()}, etcdstore.WithPrefix(uniquePrefix(t)))
	l, err := s.Acquire(ctxFor(t), "k", "o", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctxFor(t), l); err != nil {
		t.Fatal(err)
	}
	before := px.accepted.Load()
	// real time: etcd counts the client's real pings (10 s apart, gRPC's
	// least) and closes the connection at the fourth; 55 s leaves room
	// for a loaded machine.
	time.Sleep(55 * time.Second)
	if n := px.accepted.Load() - before; n != 0 {
		t.Errorf("an idle Store opened %d new connections to etcd in 55 s (etcd closed the idle ones: too_many_pings), want 0", n)
	}
	if _, err := s.Acquire(ctxFor(t), "k", "o", time.Second); err != nil {
		t.Fatalf("Acquire after the idle spell: %v", err)
	}
}

// countingProxy forwards TCP connections to one address and counts them.
type countingProxy struct {
	ln       net.Listener
	accepted atomic.Int64
	wg       sync.WaitGroup
}

func newCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ln: ln}
	var (
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			conns = append(conns, c, up)
			mu.Unlock()
			for _, pair := range [][2]net.Conn{{c, up}, {up, c}} {
				p.wg.Go(func() {
					_, _ = io.Copy(pair[0], pair[1])
					// One side ended: end both, as a proxy does.
					pair[0].Close()
					pair[1].Close()
				})
			}
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }
