package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/leasehq/lease"
	"github.com/spf13/cobra"
)

// DefaultServer is the server the client commands talk to when neither
// --server nor LEASE_SERVER says otherwise: `lease serve`'s default address.
const DefaultServer = "http://127.0.0.1:7420"

// Environment variables read by the client commands and `lease run`.
const (
	EnvServer    = "LEASE_SERVER"
	EnvAuthToken = "LEASE_AUTH_TOKEN"
)

// dialFunc returns a backend that talks to the server at url with the bearer
// token (empty: none), giving up on each request after timeout (0: the
// client's own default).
type dialFunc func(url, token string, timeout time.Duration) (lease.Backend, error)

// remoteFlags are the flags of every command that talks to a server.
type remoteFlags struct {
	server  string
	output  string
	timeout time.Duration
}

const remoteEnvHelp = `The server is --server, else $LEASE_SERVER, else ` + DefaultServer + `.
Several replicas of one service are given comma-separated
(http://a:7420,http://b:7420): requests go to the one that last answered and
move on to the next when it cannot be reached or answers 503.
The bearer token is $LEASE_AUTH_TOKEN (not a flag: command lines are visible to
other users through ps).`

// add defines the flags on cmd; a command that queues adds --wait with
// addWaitFlag afterwards.
func (r *remoteFlags) add(cmd *cobra.Command, withOutput bool) {
	cmd.Flags().StringVar(&r.server, "server", "", "server `URL`, or several replicas' comma-separated (default $"+EnvServer+" or "+DefaultServer+")")
	cmd.Flags().DurationVar(&r.timeout, "timeout", 30*time.Second, "give up on the server after this long")
	if withOutput {
		cmd.Flags().StringVarP(&r.output, "output", "o", "text", "output `FORMAT`: text or json (the lease as the API returns it)")
	}
}

// addWaitFlag defines --wait on cmd, and says in --timeout's help that the
// timeout counts on top of the wait: only where there is a --wait to name.
func addWaitFlag(cmd *cobra.Command, wait *time.Duration) {
	cmd.Flags().DurationVar(wait, "wait", 0, "how long to queue while KEY is held (0: try once)")
	if f := cmd.Flags().Lookup("timeout"); f != nil {
		f.Usage += " (on top of --wait)"
	}
}

// addOwnerFlag defines --owner on cmd.
func addOwnerFlag(cmd *cobra.Command, owner *string) {
	cmd.Flags().StringVar(owner, "owner", "", "owner `NAME` shown to others (default HOSTNAME-PID)")
}

// check validates the flags before anything is sent.
func (r *remoteFlags) check() error {
	switch r.output {
	case "", "text", "json":
	default:
		return usageError(fmt.Errorf("--output must be text or json, got %q", r.output))
	}
	if r.timeout <= 0 {
		return usageError(fmt.Errorf("--timeout must be positive, got %v", r.timeout))
	}
	return nil
}

// backend dials the server the flags and environment name for lease run,
// whose Client bounds its calls itself; each request keeps the HTTP client's
// default bound, so that a renewal stuck on a dead connection is tried again
// within the lease's deadline.
func (r *remoteFlags) backend(a *app) (lease.Backend, error) { return r.dial(a, 0) }

// oneShot dials the server for a command that makes one call and then exits
// (acquire, renew, release, get, list): a request may take all of --timeout,
// as documented, rather than the HTTP client's shorter default.
func (r *remoteFlags) oneShot(a *app) (lease.Backend, error) { return r.dial(a, r.timeout) }

func (r *remoteFlags) dial(a *app, timeout time.Duration) (lease.Backend, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	url, from := r.server, "--server"
	if url == "" {
		url, from = a.getenv(EnvServer), "$"+EnvServer
	}
	if url == "" {
		url = DefaultServer
	}
	if err := checkServerURL(url, from); err != nil {
		return nil, err
	}
	b, err := a.dial(url, a.getenv(EnvAuthToken), timeout)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", url, err)
	}
	return b, nil
}

// checkServerURL catches the commonest slips in a server address, a missing
// scheme (127.0.0.1:7420, which url.Parse rejects with a message about path
// segments, or localhost:7420, which it reads as scheme "localhost") and an
// empty entry in a comma-separated list, with one message whether the
// address came from --server or $LEASE_SERVER (from says which). The rest is
// checked by the client that dials it.
func checkServerURL(urls, from string) error {
	for url := range strings.SplitSeq(urls, ",") {
		if url = strings.TrimSpace(url); url == "" {
			return usageError(fmt.Errorf("%s %q has an empty entry: want URLs separated by single commas, such as http://a:7420,http://b:7420", from, urls))
		}
		scheme, _, ok := strings.Cut(url, "://")
		switch {
		case !ok:
			return usageError(fmt.Errorf("%s %q has no scheme: want a URL such as http://%s", from, url, url))
		case !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https"):
			return usageError(fmt.Errorf("%s %q: scheme %q is not http or https", from, url, scheme))
		}
	}
	return nil
}

func (r *remoteFlags) json() bool { return r.output == "json" }

// closeBackend lets go of what a dialled backend holds (idle connections).
func closeBackend(b lease.Backend) {
	if c, ok := b.(io.Closer); ok {
		_ = c.Close()
	}
}
