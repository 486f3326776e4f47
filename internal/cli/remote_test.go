package cli

import (
	"strings"
	"testing"

	"github.com/leasehq/lease/memstore"
)

// TestServerURLWithoutScheme: host:port without http:// is the commonest
// slip in a server address. From --server or from $LEASE_SERVER, every
// client command (lease run included) answers with the same usage error,
// which shows the URL it wants, and dials nothing.
func TestServerURLWithoutScheme(t *testing.T) {
	childEnviron(t, "env", "", 0)
	for _, addr := range []string{"127.0.0.1:7420", "localhost:7420", "leases.internal"} {
		for _, args := range [][]string{{"get", "job"}, {"list"}, runArgs(t, "job")} {
			var msgs []string
			for _, via := range []struct {
				env  map[string]string
				args []string
				name string
			}{
				{nil, []string{"--server", addr}, "--server"},
				{map[string]string{EnvServer: addr}, nil, "$" + EnvServer},
			} {
				// The flag goes before --, where lease run's CMD begins.
				full := append(append(append([]string{}, args[0]), via.args...), args[1:]...)
				r := cliHTTP(t, via.env, nil, full...)
				if r.code != ExitUsage || r.stdout != "" {
					t.Errorf("%v with %s: exit %d stdout %q, want %d and nothing (stderr %q)", args[0], via.name, r.code, r.stdout, ExitUsage, r.stderr)
				}
				oneErrorLine(t, r, via.name, "http://"+addr)
				msgs = append(msgs, strings.Replace(r.stderr, via.name, "FROM", 1))
			}
			if msgs[0] != msgs[1] {
				t.Errorf("%v: --server says %q, $%s says %q", args[0], msgs[0], EnvServer, msgs[1])
			}
		}
	}
	// A scheme other than http or https is named as such.
	r := cli(t, memstore.New(), nil, nil, "get", "job", "--server", "ftp://h:21")
	if r.code != ExitUsage || r.url != "" {
		t.Errorf("ftp://: exit %d, dialled %q", r.code, r.url)
	}
	oneErrorLine(t, r, `"ftp"`)
	// The scheme is case-insensitive, as in any URL.
	r = cli(t, memstore.New(), nil, nil, "get", "job", "--server", "HTTP://h:1")
	if r.url != "HTTP://h:1" {
		t.Errorf("HTTP://h:1: exit %d, dialled %q (stderr %q)", r.code, r.url, r.stderr)
	}
}
