package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/memstore"
	"go.uber.org/goleak"
)

// childEnv selects what the test binary does when a test starts it as the
// command of lease run.
const (
	childEnv     = "LEASE_CLI_TEST_CHILD"
	childFileEnv = "LEASE_CLI_TEST_FILE"
	childExitEnv = "LEASE_CLI_TEST_EXIT"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	code := pgtest.M(m).Run()
	removeBinary()
	if code == 0 {
		code = verifyNoLeaks()
	}
	os.Exit(code)
}

// verifyNoLeaks is goleak's check, patient with an embedded etcd whose peer
// connections end by themselves a few seconds after its Close (see
// etcdtest.VerifyTestMain).
func verifyNoLeaks() int {
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := goleak.Find()
		if err == nil {
			return 0
		}
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "goroutines left after the tests:", err)
			return 1
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// child is the command the run tests supervise:
//
//	env          print LEASE_KEY, LEASE_TOKEN, LEASE_OWNER and exit $LEASE_CLI_TEST_EXIT
//	term         say "ready" in $LEASE_CLI_TEST_FILE, wait for SIGTERM, record
//	             its arrival as "term UNIXNANO" and exit $LEASE_CLI_TEST_EXIT
//	ignore-term  say "ready", ignore SIGTERM, sleep
//	wait-go      say "ready", wait for the file $LEASE_CLI_TEST_FILE.go to
//	             exist, and exit $LEASE_CLI_TEST_EXIT
//	slot         as wait-go, saying "ready KEY TOKEN SLOT" from LEASE_KEY,
//	             LEASE_TOKEN and LEASE_SLOT
func child(mode string) int {
	code, _ := strconv.Atoi(os.Getenv(childExitEnv))
	file := os.Getenv(childFileEnv)
	note := func(s string) {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(100)
		}
		fmt.Fprintln(f, s)
		f.Close()
	}
	switch mode {
	case "env":
		fmt.Printf("key=%s token=%s owner=%s\n", os.Getenv(EnvKey), os.Getenv(EnvToken), os.Getenv(EnvOwner))
		return code
	case "term":
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM)
		note("ready " + os.Getenv(EnvToken))
		select {
		case <-sigs:
			note("term " + strconv.FormatInt(time.Now().UnixNano(), 10))
			return code
		case <-time.After(time.Minute):
			return 101
		}
	case "ignore-term":
		signal.Ignore(syscall.SIGTERM)
		note("ready " + os.Getenv(EnvToken))
		time.Sleep(time.Minute)
		return 102
	case "wait-go", "slot":
		if mode == "slot" {
			note("ready " + os.Getenv(EnvKey) + " " + os.Getenv(EnvToken) + " " + os.Getenv(EnvSlot))
		} else {
			note("ready " + os.Getenv(EnvToken))
		}
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(file + ".go"); err == nil {
				return code
			}
		}
		return 104
	}
	fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
	return 103
}

// childArgv is the argv of the test binary as a lease run command.
func childArgv(t *testing.T) []string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{exe, "-test.run=^$"}
}

// childEnviron sets the child's mode for commands started by this process.
func childEnviron(t *testing.T, mode, file string, exit int) {
	t.Setenv(childEnv, mode)
	t.Setenv(childFileEnv, file)
	t.Setenv(childExitEnv, strconv.Itoa(exit))
}

// waitFile polls path until it has a line starting with prefix and returns
// that line.
func waitFile(t *testing.T, path, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(path)
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, prefix) {
				return line
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	data, _ := os.ReadFile(path)
	t.Fatalf("%s has no line starting with %q after %v; it has %q", path, prefix, within, data)
	return ""
}

// result is what one in-process run of the command printed and returned.
type result struct {
	code           int
	stdout, stderr string
	url, token     string // what the command dialled with
}

// cli runs the lease command in process against b.
func cli(t *testing.T, b lease.Backend, env map[string]string, sigs <-chan os.Signal, args ...string) result {
	t.Helper()
	return cliOnClock(t, b, nil, env, sigs, args...)
}

// shared is b as a command under test dials it: the commands of a test
// share one store, as they would share a server, so none may close it (a
// command closes the backend it dialled when it ends).
func shared(b lease.Backend) lease.Backend {
	if s, ok := b.(*memstore.Store); ok {
		return memOpen{s}
	}
	return b
}

// memOpen is a memstore that the commands cannot close.
type memOpen struct{ *memstore.Store }

func (memOpen) Close() error { return nil }

// cliOnClock is cli with lease run's Client on clock (nil: the real one).
func cliOnClock(t *testing.T, b lease.Backend, clock lease.Clock, env map[string]string, sigs <-chan os.Signal, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	var r result
	a := &app{
		clock:  clock,
		stdin:  strings.NewReader(""),
		stdout: &out,
		stderr: &errb,
		getenv: func(k string) string { return env[k] },
		dial: func(url, token string, _ time.Duration) (lease.Backend, error) {
			r.url, r.token = url, token
			return shared(b), nil
		},
		signals: sigs,
	}
	r.code = execute(newRoot(a), args, &errb)
	r.stdout, r.stderr = out.String(), errb.String()
	return r
}

// cliHTTP runs the lease command in process as the binary would: dialling
// the server its flags and env name over HTTP.
func cliHTTP(t *testing.T, env map[string]string, sigs <-chan os.Signal, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	a := &app{
		stdin:   strings.NewReader(""),
		stdout:  &out,
		stderr:  &errb,
		getenv:  func(k string) string { return env[k] },
		dial:    dialHTTP,
		signals: sigs,
	}
	code := execute(newRoot(a), args, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// oneErrorLine fails unless stderr is exactly one line mentioning each of
// wants.
func oneErrorLine(t *testing.T, r result, wants ...string) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 1 || lines[0] == "" {
		t.Fatalf("stderr is %d lines, want one: %q", len(lines), r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(lines[0], w) {
			t.Errorf("stderr %q does not mention %q", lines[0], w)
		}
	}
}
