package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/memtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
)

// The lease binary, built once for the tests that run it as a process.
var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func leaseBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping a test that builds the lease binary")
	}
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = errors.New("the go command is needed to build lease (put /usr/local/go/bin on PATH): " + err.Error())
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "lease-cli-test-"); buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "lease")
		out, err := exec.Command(goBin, "build", "-o", buildBin, "github.com/leasehq/lease/cmd/lease").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build lease: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

func removeBinary() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// apiServer is an in-process leasehttp server over a recording memstore.
func apiServer(t *testing.T) (*httptest.Server, *renewGate) {
	t.Helper()
	g := &renewGate{Backend: memtest.New(t)}
	return apiServerOver(t, g), g
}

// apiServerOver is an in-process leasehttp server over b.
func apiServerOver(t *testing.T, b lease.Backend) *httptest.Server {
	t.Helper()
	api, err := leasehttp.NewServer(b, leasehttp.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		_ = api.Close()
		srv.Close()
	})
	return srv
}

// process is a started lease binary.
type process struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
}

func startBinary(t *testing.T, env []string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(leaseBinary(t), args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait returns the exit status, failing the test after within.
func (p *process) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(within):
		t.Fatalf("lease %v still running after %v; stderr %q", p.cmd.Args[1:], within, p.stderr.String())
		return -1
	}
}

func runBinary(t *testing.T, env []string, args ...string) result {
	t.Helper()
	p := startBinary(t, env, args...)
	code := p.wait(t, 60*time.Second)
	return result{code: code, stdout: p.stdout.String(), stderr: p.stderr.String()}
}

func childVars(mode, file string, exit int) []string {
	return []string{childEnv + "=" + mode, childFileEnv + "=" + file, childExitEnv + "=" + strconv.Itoa(exit)}
}

// TestBinaryRunLossPath stops the server under a running `lease run`: the
// command must get SIGTERM before the lease expires on the server, and lease
// run must exit 75.
func TestBinaryRunLossPath(t *testing.T) {
	srv, g := apiServer(t)
	file := filepath.Join(t.TempDir(), "child")
	// A grace past the TTL: the child, built with -race, sleeps a second
	// as it exits (GORACE atexit_sleep_ms), and must not be killed for it.
	args := append([]string{"run", "nightly", "--ttl", "1500ms", "--grace", "5s", "--allow-grace-past-ttl", "--"}, childArgv(t)...)
	p := startBinary(t, append(childVars("term", file, 0), EnvServer+"="+srv.URL), args...)
	waitFile(t, file, "ready", 20*time.Second)

	srv.CloseClientConnections()
	srv.Close() // renewals now fail to connect
	g.mu.Lock()
	last := g.last // the server's last word on when the lease expires
	g.mu.Unlock()

	line := waitFile(t, file, "term ", 20*time.Second)
	ns, _ := strconv.ParseInt(strings.TrimPrefix(line, "term "), 10, 64)
	if got := time.Unix(0, ns); !got.Before(last.Expires) {
		t.Errorf("SIGTERM at %v, not before the lease expired on the server at %v", got.Format(time.StampMicro), last.Expires.Format(time.StampMicro))
	}
	if code := p.wait(t, 20*time.Second); code != ExitTempFail {
		t.Errorf("exit %d, want %d; stderr %q", code, ExitTempFail, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "lost") {
		t.Errorf("stderr %q does not say the lease was lost", p.stderr.String())
	}
}

// TestBinaryRunHeld is the cron job that must not run twice: the key is
// held, so the command does not run, and one line says by whom.
func TestBinaryRunHeld(t *testing.T) {
	srv, g := apiServer(t)
	if _, err := g.Backend.Acquire(t.Context(), "nightly", "cron@host-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "child")
	r := runBinary(t, append(childVars("term", file, 0), EnvServer+"="+srv.URL), append([]string{"run", "nightly", "--"}, childArgv(t)...)...)
	if r.code != ExitTempFail {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, ExitTempFail, r.stderr)
	}
	oneErrorLine(t, r, `"cron@host-b"`)
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran although the key was held (%v)", err)
	}
}

// TestBinaryRunServerDown: no server, no command; one line, exit 75.
func TestBinaryRunServerDown(t *testing.T) {
	srv, _ := apiServer(t)
	url := srv.URL
	srv.Close()
	file := filepath.Join(t.TempDir(), "child")
	r := runBinary(t, append(childVars("term", file, 0), EnvServer+"="+url), append([]string{"run", "nightly", "--timeout", "5s", "--"}, childArgv(t)...)...)
	if r.code != ExitTempFail {
		t.Fatalf("exit %d, want %d; stderr %q", r.code, ExitTempFail, r.stderr)
	}
	oneErrorLine(t, r, "not running")
	if _, err := os.Stat(file); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the command ran without the lease (%v)", err)
	}
}

// TestBinaryRunForwardsSIGTERM: SIGTERM to lease run reaches the command,
// lease run exits with the command's status and releases the lease.
func TestBinaryRunForwardsSIGTERM(t *testing.T) {
	srv, g := apiServer(t)
	file := filepath.Join(t.TempDir(), "child")
	p := startBinary(t, append(childVars("term", file, 9), EnvServer+"="+srv.URL), append([]string{"run", "nightly", "--"}, childArgv(t)...)...)
	ready := waitFile(t, file, "ready", 20*time.Second)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != 9 {
		t.Errorf("exit %d, want the command's 9; stderr %q", code, p.stderr.String())
	}
	waitFile(t, file, "term ", time.Second)
	if _, err := g.Backend.Get(t.Context(), "nightly"); !errors.Is(err, lease.ErrNotFound) {
		t.Errorf("Get = %v; want the lease released", err)
	}
	g.mu.Lock()
	granted := g.last
	g.mu.Unlock()
	if tok := strings.TrimPrefix(ready, "ready "); tok != strconv.FormatUint(uint64(granted.Token), 10) || granted.Key != "nightly" {
		t.Errorf("LEASE_TOKEN = %q; the server granted %+v", tok, granted)
	}
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// TestBinaryServeAndClientCommands runs `lease serve` with credentials as
// a process, drives it with the client commands, and stops it with SIGTERM.
func TestBinaryServeAndClientCommands(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("jobs-token jobs/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startBinary(t, nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--auth-tokens-file", tokens)
	base := "http://" + listeningAddr(t, serve)
	env := []string{EnvServer + "=" + base, EnvAuthToken + "=jobs-token"}

	r := runBinary(t, env, "acquire", "jobs/backup", "--ttl", "1m", "--owner", "alice", "-o", "json")
	if r.code != ExitOK {
		t.Fatalf("acquire: exit %d, stderr %q", r.code, r.stderr)
	}
	var acquired leasehttp.LeaseJSON
	if err := json.Unmarshal([]byte(r.stdout), &acquired); err != nil {
		t.Fatalf("acquire printed %q: %v", r.stdout, err)
	}

	// get -o json is the API's answer, field for field.
	r = runBinary(t, env, "get", "jobs/backup", "-o", "json")
	var printed map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &printed); err != nil {
		t.Fatalf("get printed %q: %v", r.stdout, err)
	}
	api := apiGet(t, base+"/v1/leases/jobs%2Fbackup", "jobs-token")
	if a, b := mustJSON(t, printed), mustJSON(t, api); a != b {
		t.Errorf("get -o json printed %s; the API says %s", a, b)
	}

	r = runBinary(t, env, "acquire", "jobs/backup")
	if r.code != ExitHeld {
		t.Errorf("second acquire: exit %d, want %d", r.code, ExitHeld)
	}
	oneErrorLine(t, r, `"alice"`)
	r = runBinary(t, env, "acquire", "jobs/backup", "--wait", "300ms")
	if r.code != ExitHeld {
		t.Errorf("acquire --wait: exit %d, want %d", r.code, ExitHeld)
	}
	oneErrorLine(t, r, `"alice"`)

	tok := strconv.FormatUint(uint64(acquired.Token), 10)
	r = runBinary(t, env, "renew", "jobs/backup", "--id", acquired.ID, "--token", tok, "--ttl", "2m")
	if r.code != ExitOK || !strings.Contains(r.stdout, "token="+tok+" ") || !strings.Contains(r.stdout, "ttl=2m0s") {
		t.Errorf("renew: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, env, "list", "--prefix", "jobs/")
	if r.code != ExitOK || strings.Count(r.stdout, "\n") != 1 || !strings.HasPrefix(r.stdout, "key=jobs/backup ") {
		t.Errorf("list: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runBinary(t, env, "release", "jobs/backup", "--id", acquired.ID, "--token", tok)
	if r.code != ExitOK {
		t.Errorf("release: exit %d stderr %q", r.code, r.stderr)
	}
	r = runBinary(t, env, "get", "jobs/backup")
	if r.code != ExitNotFound {
		t.Errorf("get after release: exit %d, want %d", r.code, ExitNotFound)
	}

	r = runBinary(t, env, "acquire", "other/x")
	if r.code != ExitFailure {
		t.Errorf("outside the token's prefixes: exit %d, want %d", r.code, ExitFailure)
	}
	oneErrorLine(t, r, "forbidden")
	for _, probe := range []string{"/healthz", "/readyz", "/metrics"} {
		if code := statusOf(t, base+probe); code != 200 {
			t.Errorf("GET %s without a token: %d, want 200", probe, code)
		}
	}
	r = runBinary(t, []string{EnvServer + "=" + base}, "list")
	if r.code != ExitFailure {
		t.Errorf("without a token: exit %d, want %d", r.code, ExitFailure)
	}
	oneErrorLine(t, r, "unauthorized")

	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := serve.wait(t, 20*time.Second); code != 0 {
		t.Errorf("serve exited %d after SIGTERM; log:\n%s", code, serve.stderr.String())
	}
	if !strings.Contains(serve.stderr.String(), "msg=stopped") {
		t.Errorf("serve log does not say it stopped:\n%s", serve.stderr.String())
	}

	// Nothing listens any more: one line, exit 1.
	r = runBinary(t, env, "get", "jobs/backup", "--timeout", "2s")
	if r.code != ExitFailure {
		t.Errorf("server gone: exit %d, want %d", r.code, ExitFailure)
	}
	oneErrorLine(t, r)
}

// TestBinaryServeRefusesBadStart: failures to start are one line and a
// non-zero exit.
func TestBinaryServeRefusesBadStart(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--addr", "0.0.0.0:0", "--data-dir", dir}, ExitFailure, "--insecure"},
		{[]string{"serve", "--data-dir", dir, "--backend", "redis://127.0.0.1:1/0"}, ExitUsage, "mutually exclusive"},
		{[]string{"serve", "--backend", "redis://127.0.0.1:1/0"}, ExitFailure, "redis"},
	} {
		r := runBinary(t, nil, tc.args...)
		if r.code != tc.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", tc.args, r.code, tc.code, r.stderr)
		}
		// Log lines may come first; the error is one line of its own.
		var errLines []string
		for _, line := range strings.Split(r.stderr, "\n") {
			if strings.HasPrefix(line, "lease: ") {
				errLines = append(errLines, line)
			}
		}
		if len(errLines) != 1 || !strings.Contains(errLines[0], tc.want) {
			t.Errorf("%v: error lines %q, want one mentioning %q", tc.args, errLines, tc.want)
		}
	}
}

func statusOf(t *testing.T, url string) int {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(b.String())
}

// TestBinaryServeStoppedWhileStarting: SIGTERM while lease serve waits for
// its engine (an etcd that does not answer) stops it as SIGTERM stops a
// running server, with exit 0 and no error line: the stop was asked for.
// It used to exit 1 with "context canceled" as if the start had failed.
func TestBinaryServeStoppedWhileStarting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	etcd := ln.Addr().String()
	if err := ln.Close(); err != nil { // connections to it are refused now
		t.Fatal(err)
	}
	p := startBinary(t, nil, "serve", "--addr", "127.0.0.1:0", "--backend", "etcd://"+etcd)
	// Said as it starts, before it opens the backend.
	poll.Until(t, 20*time.Second, func() error {
		if strings.Contains(p.stderr.String(), "no credentials configured") {
			return nil
		}
		return fmt.Errorf("serve has not started: %q", p.stderr.String())
	})
	select {
	case <-p.done:
		t.Fatalf("serve exited before the signal: %q", p.stderr.String())
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 20*time.Second); code != ExitOK {
		t.Errorf("serve stopped while starting: exit %d, want 0; stderr %q", code, p.stderr.String())
	}
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if strings.HasPrefix(line, "lease: ") {
			t.Errorf("serve stopped while starting printed an error: %q", line)
		}
	}
	if !strings.Contains(p.stderr.String(), "stopped before serving") {
		t.Errorf("serve does not say it stopped: %q", p.stderr.String())
	}
}
