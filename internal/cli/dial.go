package cli

import (
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// dialHTTP returns a leasehttp client for the server at url, or for the
// replicas at a comma-separated list of URLs.
func dialHTTP(url, token string, timeout time.Duration) (lease.Backend, error) {
	var opts []leasehttp.ClientOption
	if timeout > 0 {
		opts = append(opts, leasehttp.WithTimeout(timeout))
	}
	if token != "" {
		opts = append(opts, leasehttp.WithAuthToken(token))
	}
	return leasehttp.NewClient(url, opts...)
}
