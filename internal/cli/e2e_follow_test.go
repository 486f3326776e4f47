package cli

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/election"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/semaphore"
)

// startServeBinary runs `lease serve` as a process on dataDir at addr
// ("127.0.0.1:0" for a free port) and returns it with its base URL.
func startServeBinary(t *testing.T, dataDir, addr string, flags ...string) (*process, string) {
	t.Helper()
	p := startBinary(t, nil, append([]string{"serve", "--addr", addr, "--data-dir", dataDir}, flags...)...)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := listeningRE.FindStringSubmatch(p.stderr.String()); m != nil {
			return p, "http://" + m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("serve exited: %q", p.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("serve never said where it listens: %q", p.stderr.String())
	return nil, ""
}

// linesOf waits until out has n lines and returns them.
func linesOf(t *testing.T, what string, out *syncBuffer, n int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := strings.TrimSuffix(out.String(), "\n")
		var lines []string
		if s != "" {
			lines = strings.Split(s, "\n")
		}
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d lines of the %d awaited: %q", what, len(lines), n, lines)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBinaryWatchLeaderAndSlots drives the new commands as processes
// against a real `lease serve`, and restarts the server under the streams:
// lease watch and lease leader --watch resume from the current state and
// say so on stderr, --no-resume exits 1, SIGINT ends them with 0; lease
// run --slots holds distinct slots.
func TestBinaryWatchLeaderAndSlots(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	serve, base := startServeBinary(t, dataDir, "127.0.0.1:0")
	env := []string{EnvServer + "=" + base}
	c := httpClient(t, base)
	ctx := t.Context()

	held, err := c.Acquire(ctx, "jobs/a", "alice", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	watch := startBinary(t, env, "watch", "jobs/")
	once := startBinary(t, env, "watch", "jobs/", "--no-resume")
	leader := startBinary(t, env, "leader", "db/primary", "--watch", "-o", "json")
	linesOf(t, "watch", watch.stdout, 2)
	linesOf(t, "watch --no-resume", once.stdout, 2)
	linesOf(t, "leader --watch", leader.stdout, 1)

	e, err := election.New(newLeaseClient(t, c), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(ctx, "db/primary", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Acquire(ctx, "jobs/b", "bob", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := linesOf(t, "watch", watch.stdout, 3)
	if want := "event=acquired " + textLine(withoutID(b)); got[2] != want {
		t.Errorf("watch printed %q, want %q", got[2], want)
	}
	if got := linesOf(t, "leader --watch", leader.stdout, 2); !strings.Contains(got[1], `"value":"node-1","token":`+itoa(term.Token())) {
		t.Errorf("leader --watch printed %q for the term of node-1, token %d", got[1], term.Token())
	}

	// Two commands hold the two slots at once.
	file := filepath.Join(t.TempDir(), "child")
	slotArgs := append([]string{"run", "render", "--slots", "2", "--"}, childArgv(t)...)
	runs := []*process{
		startBinary(t, append(childVars("slot", file, 0), env...), slotArgs...),
		startBinary(t, append(childVars("slot", file, 0), env...), slotArgs...),
	}
	var slots []string
	for _, line := range readyLines(t, file, 2) {
		slots = append(slots, strings.Fields(line)[3])
	}
	slices.Sort(slots)
	if !slices.Equal(slots, []string{"0", "1"}) {
		t.Errorf("slots %v, want 0 and 1", slots)
	}
	if r := runBinary(t, env, slotArgs...); r.code != ExitTempFail {
		t.Errorf("a third lease run --slots 2: exit %d, want %d; stderr %q", r.code, ExitTempFail, r.stderr)
	}
	if err := os.WriteFile(file+".go", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range runs {
		if code := p.wait(t, 20*time.Second); code != ExitOK {
			t.Errorf("lease run --slots: exit %d; stderr %q", code, p.stderr.String())
		}
	}

	// The server restarts on the same data and address. What watch printed
	// before is counted first: it may resume as soon as the server is back.
	n := len(linesOf(t, "watch", watch.stdout, 3))
	addr := strings.TrimPrefix(base, "http://")
	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := serve.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	if code := once.wait(t, 20*time.Second); code != ExitFailure {
		t.Errorf("watch --no-resume: exit %d when the stream broke, want %d", code, ExitFailure)
	}
	oneErrorLine(t, result{stderr: once.stderr.String()}, "watch")
	startServeBinary(t, dataDir, addr)

	// watch says it resumes, and starts again from the current state: the
	// leases the store kept, then synced.
	got = linesOf(t, "watch", watch.stdout, n+3)
	want := []string{"event=held " + textLine(withoutID(held)), "event=held " + textLine(withoutID(b)), "event=synced"}
	if !slices.Equal(got[n:n+3], want) {
		t.Errorf("after the restart watch printed %q, want %q", got[n:], want)
	}
	if !strings.Contains(watch.stderr.String(), "resuming") {
		t.Errorf("watch's stderr %q does not say it resumes", watch.stderr.String())
	}

	// leader --watch resumes too; the term the store kept is no change.
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	got = linesOf(t, "leader --watch", leader.stdout, 3)
	if got[2] != `{"key":"db/primary","token":0}` {
		t.Errorf("after the resignation leader --watch printed %q", got[2:])
	}
	for _, p := range []*process{watch, leader} {
		if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		if code := p.wait(t, 20*time.Second); code != ExitOK {
			t.Errorf("%v: exit %d after SIGINT, want 0; stderr %q", p.cmd.Args[1:], code, p.stderr.String())
		}
	}
	if got := linesOf(t, "leader --watch", leader.stdout, 3); len(got) != 3 {
		t.Errorf("leader --watch printed %q, want 3 lines", got)
	}
}

// TestBinaryWatchReportsASilentServer: lease watch and lease leader --watch
// behind a server that stops delivering without closing (SIGSTOPped: its
// sockets stay open) report the broken stream, where they used to print
// nothing for as long as TCP kept the connection: with --no-resume they
// exit 1 with one line saying the stream went silent.
func TestBinaryWatchReportsASilentServer(t *testing.T) {
	serve, base := startServeBinary(t, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0", "--watch-heartbeat", "50ms")
	env := []string{EnvServer + "=" + base}
	watch := startBinary(t, env, "watch", "jobs/", "--no-resume")
	leader := startBinary(t, env, "leader", "db/primary", "--watch", "--no-resume")
	linesOf(t, "watch", watch.stdout, 1)
	linesOf(t, "leader --watch", leader.stdout, 1)
	if err := serve.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.cmd.Process.Signal(syscall.SIGCONT) })
	for _, p := range []*process{watch, leader} {
		if code := p.wait(t, 20*time.Second); code != ExitFailure {
			t.Errorf("%v: exit %d behind a silent server, want %d", p.cmd.Args[1:], code, ExitFailure)
		}
		oneErrorLine(t, result{stderr: p.stderr.String()}, "silent")
	}
}

// TestServeWithoutWatch: behind a server whose backend cannot watch (every
// engine of lease serve can; a backend of one's own may not), lease watch
// refuses with one line, while lease leader --watch and lease run --slots
// --wait read and poll instead.
func TestServeWithoutWatch(t *testing.T) {
	api, err := leasehttp.NewServer(backendOnly{memtest.New(t)}, leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		_ = api.Close()
		srv.Close()
	})
	base := srv.URL
	c := httpClient(t, base)

	w := cliStream(t, nil, "watch", "--server", base)
	if code := w.exit(t); code != ExitFailure {
		t.Errorf("watch: exit %d, want %d", code, ExitFailure)
	}
	oneErrorLine(t, result{stderr: w.stderr.String()}, "cannot watch")

	s := cliStream(t, nil, "leader", "db/primary", "--watch", "--server", base)
	if got := s.lines(t, 1); got[0] != "key=db/primary token=0" {
		t.Fatalf("first line %q", got[0])
	}
	e, err := election.New(newLeaseClient(t, c), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	term, err := e.Campaign(t.Context(), "db/primary", "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := s.lines(t, 2); tokenOf(t, got[1]) != term.Token() {
		t.Errorf("leader --watch printed %q for token %d", got[1], term.Token())
	}
	if err := term.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := s.lines(t, 3); got[2] != "key=db/primary token=0" {
		t.Errorf("after the resignation: %q", got[2])
	}
	if code := s.interrupt(t); code != ExitOK {
		t.Errorf("exit %d after SIGINT; stderr %q", code, s.stderr.String())
	}

	// The slot frees at its holder's release; the waiter polls for it.
	l, err := c.Acquire(t.Context(), "render/slots/0", "other", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	childEnviron(t, "env", "", 0)
	done := make(chan result, 1)
	go func() {
		done <- cliHTTP(t, map[string]string{EnvServer: base}, nil, runArgs(t, "render", "--slots", "1", "--wait", "20s")...)
	}()
	waitUntil(t, "the waiter in line", func() bool {
		_, err := c.Get(t.Context(), "render/queue")
		return err == nil
	})
	if err := c.Release(t.Context(), l); err != nil {
		t.Fatal(err)
	}
	if r := ended(t, done, "the slot was freed"); r.code != ExitOK || !strings.HasPrefix(r.stdout, "key=render/slots/0 ") {
		t.Errorf("lease run --slots 1 --wait: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	var _ lease.Watcher = c // the client says it watches; the server refuses
}

// TestCancelWaitOnAHungServer: a caller that gives up a wait — Campaign,
// semaphore Acquire, lease.Client.Acquire through leasehttp — gets its
// answer at once even from a server that stopped answering (SIGSTOPped:
// its sockets stay open), where it used to wait out the request timeout
// (10 s). The bound here is generous for a shared machine; the benchmark
// measures the p99.
func TestCancelWaitOnAHungServer(t *testing.T) {
	serve, base := startServeBinary(t, filepath.Join(t.TempDir(), "data"), "127.0.0.1:0")
	c := httpClient(t, base)
	ctx := t.Context()
	for _, k := range []string{"db/primary", "render/queue", "jobs/a"} {
		if _, err := c.Acquire(ctx, k, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	lc, err := lease.NewClient(c, lease.WithOwner("waiter"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := election.New(lc, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sem, err := semaphore.New(lc, "render", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	waits := map[string]func(ctx context.Context) error{
		"Campaign":             func(ctx context.Context) error { _, err := e.Campaign(ctx, "db/primary", "node-2"); return err },
		"semaphore Acquire":    func(ctx context.Context) error { _, err := sem.Acquire(ctx); return err },
		"lease.Client.Acquire": func(ctx context.Context) error { _, err := lc.Acquire(ctx, "jobs/a", time.Minute); return err },
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type ended struct {
		name string
		err  error
		at   time.Time
	}
	done := make(chan ended, len(waits))
	for name, wait := range waits {
		go func() { err := wait(wctx); done <- ended{name, err, time.Now()} }()
	}
	waitMetric(t, base, "lease_waiters 3")
	if err := serve.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = serve.cmd.Process.Signal(syscall.SIGCONT) })
	cancelled := time.Now()
	cancel()
	for range waits {
		select {
		case r := <-done:
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("%s given up: %v, want context.Canceled", r.name, r.err)
			}
			if took := r.at.Sub(cancelled); took > 2*time.Second {
				t.Errorf("%s returned %v after its context was cancelled, want under 2 s", r.name, took)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a wait given up has not returned after 20 s")
		}
	}
}
