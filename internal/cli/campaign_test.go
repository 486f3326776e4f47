package cli

import (
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
)

func campaignArgs(t *testing.T, flags ...string) []string {
	return append(append([]string{"campaign"}, flags...), append([]string{"--"}, childArgv(t)...)...)
}

// TestCampaignLeadsWithItsValue: the command runs as the leader, with the
// value as LEASE_OWNER and the term's token, and the term is resigned when
// it exits.
func TestCampaignLeadsWithItsValue(t *testing.T) {
	b := memtest.New(t)
	childEnviron(t, "env", "", 3)
	r := cli(t, b, nil, nil, campaignArgs(t, "svc/leader", "--value", "10.0.0.7:8080")...)
	if r.code != 3 {
		t.Fatalf("exit %d, want the command's 3 (stderr %q)", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, "key=svc/leader token=") || !strings.HasSuffix(r.stdout, " owner=10.0.0.7:8080\n") {
		t.Errorf("command saw %q", r.stdout)
	}
	if _, err := b.Get(t.Context(), "svc/leader"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("after the command, Get = %v; want the term resigned", err)
	}
}

// TestCampaignWaitsToBeElected: without --wait it waits until the leader's
// term ends, however long; with --wait it gives up with 75.
func TestCampaignWaitsToBeElected(t *testing.T) {
	b := memtest.New(t)
	first, err := b.Acquire(t.Context(), "svc/leader", "incumbent", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	r := cli(t, b, nil, nil, campaignArgs(t, "svc/leader", "--value", "next", "--wait", "50ms")...)
	if r.code != ExitTempFail || r.stdout != "" {
		t.Fatalf("--wait 50ms behind a leader: exit %d stdout %q, want %d and no command", r.code, r.stdout, ExitTempFail)
	}
	r = cli(t, b, nil, nil, campaignArgs(t, "svc/leader", "--value", "next")...)
	if r.code != ExitOK || !strings.HasSuffix(r.stdout, " owner=next\n") {
		t.Fatalf("exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if tok, _ := strconv.ParseUint(strings.Fields(r.stdout)[1][len("token="):], 10, 64); tok <= uint64(first.Token) {
		t.Errorf("the new leader's token %d is not above %d", tok, first.Token)
	}
}

// TestCampaignLossStopsTheCommand: a lost term stops the command as lease
// run does (SIGTERM) and exits 75.
func TestCampaignLossStopsTheCommand(t *testing.T) {
	g := &renewGate{Backend: memtest.New(t)}
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "term", file, 0)
	done := make(chan result, 1)
	go func() {
		done <- cli(t, g, nil, nil, campaignArgs(t, "svc/leader", "--value", "v", "--ttl", "1s", "--grace", "5s", "--allow-grace-past-ttl")...)
	}()
	waitFile(t, file, "ready", 10*time.Second)
	g.fail()
	waitFile(t, file, "term ", 10*time.Second)
	if r := ended(t, done, "after a loss"); r.code != ExitTempFail {
		t.Errorf("exit %d, want %d", r.code, ExitTempFail)
	}
}

func TestCampaignNeedsAValue(t *testing.T) {
	r := cli(t, memtest.New(t), nil, nil, campaignArgs(t, "svc/leader")...)
	if r.code != ExitUsage || !strings.Contains(r.stderr, "--value") {
		t.Fatalf("exit %d stderr %q, want %d naming --value", r.code, r.stderr, ExitUsage)
	}
}

// TestRunSlotsRefusesAnotherLimit: lease run --slots with an N other than
// the one the semaphore's holders were admitted under runs nothing and
// exits 1 (retrying will not help), naming the stored limit.
func TestRunSlotsRefusesAnotherLimit(t *testing.T) {
	b := memtest.New(t)
	if _, err := b.Acquire(t.Context(), "render/slots/0", "w #limit=2", time.Minute); err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	r := cli(t, b, nil, nil, runArgs(t, "render", "--slots", "4")...)
	if r.code != ExitFailure || r.stdout != "" {
		t.Fatalf("exit %d stdout %q, want %d and no command", r.code, r.stdout, ExitFailure)
	}
	oneErrorLine(t, r, "limit of 2")
}
