package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// quietOnce silences toxiproxy's global logger, which its toxics write to.
var quietOnce sync.Once

// Proxies is an in-process toxiproxy with one proxy per engine address, each
// listening on a free loopback port. Its methods are safe for concurrent use.
type Proxies struct {
	server  *toxiproxy.ApiServer
	mu      sync.Mutex
	proxies []*toxiproxy.Proxy
}

// NewProxies starts a proxy on 127.0.0.1 for each upstream address and
// returns them; Listen(i) is the address to dial instead of upstreams[i].
func NewProxies(upstreams []string) (*Proxies, error) {
	quietOnce.Do(func() { zerolog.SetGlobalLevel(zerolog.Disabled) })
	p := &Proxies{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
	for i, up := range upstreams {
		px := toxiproxy.NewProxy(p.server, fmt.Sprintf("engine%d", i), "127.0.0.1:0", up)
		if err := px.Start(); err != nil {
			p.Close()
			return nil, fmt.Errorf("chaos: starting a proxy to %s: %w", up, err)
		}
		p.proxies = append(p.proxies, px)
	}
	return p, nil
}

// Listen returns the address proxy i listens on.
func (p *Proxies) Listen(i int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	px := p.proxies[i]
	px.Lock()
	defer px.Unlock()
	return px.Listen
}

// Addrs returns every proxy's listening address.
func (p *Proxies) Addrs() []string {
	out := make([]string, len(p.proxies))
	for i := range out {
		out[i] = p.Listen(i)
	}
	return out
}

// Toxic is one toxiproxy toxic: Type is "latency", "bandwidth", "timeout",
// "reset_peer", ...; Stream "upstream" (client to engine) or "downstream";
// Attributes as toxiproxy names them ("latency", "jitter", "rate", "timeout").
type Toxic struct {
	Name       string
	Type       string
	Stream     string
	Attributes map[string]int64
}

func (x Toxic) String() string {
	var attrs []string
	for k, v := range x.Attributes {
		attrs = append(attrs, fmt.Sprintf("%s=%d", k, v))
	}
	return fmt.Sprintf("%s %s %s", x.Type, x.Stream, strings.Join(attrs, " "))
}

// Add adds the toxics to every proxy; existing connections get them too.
func (p *Proxies) Add(toxics ...Toxic) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, px := range p.proxies {
		for _, x := range toxics {
			body, err := json.Marshal(map[string]any{
				"name": x.Name, "type": x.Type, "stream": x.Stream, "toxicity": 1.0, "attributes": x.Attributes,
			})
			if err != nil {
				return fmt.Errorf("chaos: toxic %s: %w", x.Name, err)
			}
			if _, err := px.Toxics.AddToxicJson(strings.NewReader(string(body))); err != nil {
				return fmt.Errorf("chaos: adding toxic %s to %s: %w", x.Name, px.Name, err)
			}
		}
	}
	return nil
}

// Reset removes every toxic from every proxy.
func (p *Proxies) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, px := range p.proxies {
		px.Toxics.ResetToxics(context.Background())
	}
}

// Close stops every proxy and closes its connections.
func (p *Proxies) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, px := range p.proxies {
		px.Toxics.ResetToxics(context.Background())
		px.Stop()
	}
	p.proxies = nil
}

// ServerWaiters is the waiters figure of a lease server's GET /v1/stats at
// base (asked directly, not through a proxy): how many acquires wait there.
func ServerWaiters(base string) (int, error) {
	resp, err := http.Get(base + "/v1/stats")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Waiters int `json:"waiters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("chaos: the stats of %s: %w", base, err)
	}
	return st.Waiters, nil
}
