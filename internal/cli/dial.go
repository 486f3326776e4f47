package cli

import (
	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// dialHTTP returns a leasehttp client for the server at url.
func dialHTTP(url, token string) (lease.Backend, error) {
	var opts []leasehttp.ClientOption
	if token != "" {
		opts = append(opts, leasehttp.WithAuthToken(token))
	}
	return leasehttp.NewClient(url, opts...)
}
