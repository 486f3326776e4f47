package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
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

// TestCampaignInterruptedWhileWaitingLeavesTheLine: SIGINT while lease
// campaign waits behind a leader withdraws its candidacy as lease acquire
// and lease run give a wait up: the server is told and its word awaited (no
// wait left in line, the leader's term untouched), CMD never runs, the exit
// is run's 75, and one line says what became of the candidacy. It said
// "lease: run: interrupt while acquiring" and no more: neither that it was
// a candidacy nor whether the server had confirmed its end.
func TestCampaignInterruptedWhileWaitingLeavesTheLine(t *testing.T) {
	store := memtest.New(t)
	srv := apiServerOver(t, store)
	leader, err := store.Acquire(t.Context(), "svc/leader", "incumbent", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	r := interrupt(t, srv.URL, func() bool { return serverWaiters(t, srv.URL) == 1 },
		campaignArgs(t, "svc/leader", "--value", "next", "--timeout", "5s")...)
	if r.code != ExitTempFail || r.stdout != "" {
		t.Errorf("exit %d stdout %q, want %d and no command", r.code, r.stdout, ExitTempFail)
	}
	oneErrorLine(t, r, "lease: campaign: ", "waiting to lead", `"svc/leader"`, "not running", "given up", "server confirmed", "nothing is held")
	if n := serverWaiters(t, srv.URL); n != 0 {
		t.Errorf("%d waits in line after the interrupted campaign, want 0", n)
	}
	if got, err := store.Get(t.Context(), "svc/leader"); err != nil || got.Token != leader.Token {
		t.Errorf("Get = %+v, %v; want the leader's term alone", got, err)
	}
}

// TestCampaignInterruptedWhileLeadingResigns: SIGINT while leading is
// passed on to CMD, as lease run passes it on; once CMD has died of it the
// term is resigned at once (the next candidate need not wait for its TTL),
// the exit is CMD's 128+2, and one line says what was done with the term.
// Nothing was said: the exit status alone told of the signal, and nothing
// of the term.
func TestCampaignInterruptedWhileLeadingResigns(t *testing.T) {
	store := memtest.New(t)
	srv := apiServerOver(t, store)
	file := filepath.Join(t.TempDir(), "child")
	childEnviron(t, "term", file, 0) // it waits for SIGTERM: SIGINT kills it
	ready := func() bool {
		data, _ := os.ReadFile(file)
		return strings.HasPrefix(string(data), "ready ")
	}
	r := interrupt(t, srv.URL, ready, campaignArgs(t, "svc/leader", "--value", "v", "--ttl", "1m")...)
	want := 128 + int(syscall.SIGINT)
	if r.code != want {
		t.Errorf("exit %d, want %d, CMD's death by SIGINT (stderr %q)", r.code, want, r.stderr)
	}
	data, _ := os.ReadFile(file)
	token := strings.TrimSpace(strings.TrimPrefix(string(data), "ready "))
	oneErrorLine(t, r, "lease: campaign: ", "interrupt passed on", "(status "+strconv.Itoa(want)+")", `resigned the term of "svc/leader" (token `+token+")")
	if _, err := store.Get(t.Context(), "svc/leader"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get = %v after the interrupted leader exited; want the term resigned", err)
	}
}

// TestCampaignInterruptedTwiceEndsAtOnce: a second signal while an
// interrupted lease campaign (or lease run) waits for a hung server's word
// ends that wait at once, as it ends lease acquire's, and says the term's
// fate is unknown. It was swallowed: the command sat out the wait (10 s
// here, the bound of the Client's own requests to give the wait up) and
// then said the server had not confirmed it "within --timeout 1m0s".
func TestCampaignInterruptedTwiceEndsAtOnce(t *testing.T) {
	srv, arrived := hungServer(t)
	childEnviron(t, "env", "", 0)
	sigs := make(chan os.Signal, 2)
	done := make(chan result, 1)
	go func() {
		done <- cliHTTP(t, map[string]string{EnvServer: srv.URL}, sigs, campaignArgs(t, "svc/leader", "--value", "v", "--timeout", "1m")...)
	}()
	poll.True(t, 10*time.Second, "the wait at the server", func() bool { return len(arrived) > 0 })
	start := time.Now()
	sigs <- syscall.SIGINT
	sigs <- syscall.SIGINT
	r := ended(t, done, "a second SIGINT while it waited for the server's word")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("ended %v after the second signal, want at once", took)
	}
	if r.code != ExitTempFail || r.stdout != "" {
		t.Errorf("exit %d stdout %q, want %d and no command", r.code, r.stdout, ExitTempFail)
	}
	oneErrorLine(t, r, "waiting to lead", "second signal", "fate is unknown")
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
