package cli

import (
	"strings"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

// TestDefaultOwnerIsTheLibrarys: without --owner, lease acquire and lease
// run give the owner name a lease.Client gives without WithOwner, computed
// in one place (lease.DefaultOwner), so that the same process shows the same
// name whichever way it took the lease.
func TestDefaultOwnerIsTheLibrarys(t *testing.T) {
	want := lease.DefaultOwner()
	b := memtest.New(t)
	r := cli(t, b, nil, nil, "acquire", "owned/acquire", "--ttl", "10s")
	if r.code != ExitOK {
		t.Fatalf("acquire: exit %d, stderr %q", r.code, r.stderr)
	}
	l, err := b.Get(t.Context(), "owned/acquire")
	if err != nil {
		t.Fatal(err)
	}
	if l.Owner != want {
		t.Errorf("lease acquire without --owner: owner %q, want lease.DefaultOwner() %q", l.Owner, want)
	}

	childEnviron(t, "env", "", 0)
	r = cli(t, b, nil, nil, runArgs(t, "owned/run")...)
	if r.code != ExitOK {
		t.Fatalf("run: exit %d, stderr %q", r.code, r.stderr)
	}
	if !strings.HasSuffix(r.stdout, " owner="+want+"\n") {
		t.Errorf("lease run without --owner: the command saw %q, want owner=%s", r.stdout, want)
	}
}
