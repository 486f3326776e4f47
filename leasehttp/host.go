package leasehttp

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/leasehq/lease"
)

// A server without credentials trusts whoever can connect, which it limits
// to this machine by listening on loopback. A web page can still reach it
// through DNS rebinding: the page's own name is made to resolve to
// 127.0.0.1, and the browser then sends the page's requests, with that name
// in Host, to this server as same-origin requests. So without credentials
// the server answers /v1 only for a Host that names loopback, or one
// listed with WithAllowedHosts. Loopback means "localhost" and names under
// ".localhost" (RFC 6761; browsers resolve them to loopback themselves,
// never through DNS), and the addresses 127.0.0.0/8 and ::1 (also
// IPv4-mapped). With credentials the check is off: a page cannot learn the
// bearer token, whatever name it uses.

// hostSet is the Host names and addresses a server without credentials
// answers for besides loopback, normalised by normalHost.
type hostSet map[string]bool

// WithAllowedHosts adds names or addresses (without port) that a server
// without credentials answers /v1 requests for, besides loopback names and
// addresses. Other requests are answered 403 "forbidden", which is what
// keeps a web page from using the server through DNS rebinding. It has no
// effect on a server with credentials, which answers any Host.
func WithAllowedHosts(hosts []string) ServerOption {
	return func(c *serverConfig) error {
		for _, h := range hosts {
			n, err := allowedHost(h)
			if err != nil {
				return err
			}
			if c.hosts == nil {
				c.hosts = hostSet{}
			}
			c.hosts[n] = true
		}
		return nil
	}
}

// ValidateAllowedHosts reports whether WithAllowedHosts accepts hosts: each
// a host name or an IP address (IPv6 with or without brackets), without
// port. The error matches lease.ErrInvalid.
func ValidateAllowedHosts(hosts []string) error {
	for _, h := range hosts {
		if _, err := allowedHost(h); err != nil {
			return err
		}
	}
	return nil
}

// allowedHost checks and normalises one WithAllowedHosts entry.
func allowedHost(h string) (string, error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: leasehttp: allowed host %s %s", lease.ErrInvalid, quoteName(h), why)
	}
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		if a, err := netip.ParseAddr(h[1 : len(h)-1]); err == nil && a.Is6() {
			return normalHost(h), nil
		}
		return "", bad("is not an IPv6 address in brackets")
	}
	if _, err := netip.ParseAddr(h); err == nil {
		return normalHost(h), nil
	}
	if _, _, err := net.SplitHostPort(h); err == nil {
		return "", bad("has a port; give the name or address alone")
	}
	n := normalHost(h)
	if n == "" || strings.ContainsAny(n, "/:@ \t*") {
		return "", bad("is not a host name or address")
	}
	return n, nil
}

// normalHost returns the host part of a Host header value (or of an
// allowed host) in one spelling: no port, no brackets, lower case, no
// trailing dot, and an address in its canonical form.
func normalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	} else if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.Unmap().String()
	}
	return h
}

// isLoopbackHost reports whether the normalised host h can only name this
// machine.
func isLoopbackHost(h string) bool {
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

// checkHost refuses a request whose Host is neither loopback nor allowed;
// it is called only when the server has no credentials.
func (s *Server) checkHost(r *http.Request) error {
	h := normalHost(r.Host)
	if isLoopbackHost(h) || s.hosts[h] {
		return nil
	}
	return fmt.Errorf("%w: this server has no credentials, so it answers only requests addressed to loopback "+
		"(localhost, 127.0.0.1, [::1]) or to an allowed host, not to Host %s (DNS rebinding protection; "+
		"lease serve --allowed-hosts adds names)", ErrForbidden, quoteName(r.Host))
}
