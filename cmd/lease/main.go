// Command lease is the lease service and its client: `lease demo` shows the
// problem fencing tokens solve, `lease serve` runs the server, and `lease
// acquire|renew|release|get|list|run` talk to it. See README.md.
package main

import (
	"os"

	"github.com/leasehq/lease/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
