package boltstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
)

// childEnv makes the test binary act as a child process: "hold:PATH" opens
// PATH and holds it until stdin closes; "crash:PATH" acquires and releases
// leases on PATH until killed, printing "KEY TOKEN" after each Acquire returns.
const childEnv = "BOLTSTORE_TEST_CHILD"

// childNoLogEnv, set to 1, makes the child open its store without the log
// (WithoutLogForBench).
const childNoLogEnv = "BOLTSTORE_TEST_CHILD_NOLOG"

const crashKeys = 8

// crashChild runs the child side of a test when childEnv asks for it, and
// reports whether it did.
func crashChild() bool {
	mode, path, ok := strings.Cut(os.Getenv(childEnv), ":")
	if !ok {
		return false
	}
	s, err := boltstore.Open(path, storeOpts(os.Getenv(childNoLogEnv) == "1")...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	switch mode {
	case "grant":
		grantChild(s)
	case "renew":
		renewChild(s)
	case "hold":
		fmt.Println("ready")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		if err := s.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
	case "crash":
		var wg sync.WaitGroup
		for i := range crashKeys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("crash/%d", i)
				for n := 0; ; n++ {
					l, err := s.AcquireWait(context.Background(), key, "child", 250*time.Millisecond)
					if err != nil {
						fmt.Fprintln(os.Stderr, "child:", err)
						os.Exit(2)
					}
					// One write(2) per line: lines reach the pipe whole.
					fmt.Printf("%s %d\n", key, l.Token)
					if n%3 != 2 { // every third lease is left to expire
						// Not held: the machine stalled the child past the TTL.
						if err := s.Release(context.Background(), l); err != nil && !errors.Is(err, lease.ErrNotHeld) {
							fmt.Fprintln(os.Stderr, "child:", err)
							os.Exit(2)
						}
					}
				}
			}()
		}
		wg.Wait()
	default:
		fmt.Fprintln(os.Stderr, "child: unknown mode", mode)
		os.Exit(2)
	}
	return true
}

// TestCrash kills a child process that acquires leases with SIGKILL at
// random moments, then reopens its file: every token the child was given must
// be below the next token issued for its key (I1 across crashes).
func TestCrash(t *testing.T) {
	t.Parallel()
	testCrash(t, false)
}

// TestCrashWithoutLog is TestCrash on the log-less variant that
// BenchmarkCompareBoltLog measures the log against: it must be as durable.
func TestCrashWithoutLog(t *testing.T) {
	t.Parallel()
	testCrash(t, true)
}

func testCrash(t *testing.T, noLog bool) {
	opts := storeOpts(noLog)
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	path := t.TempDir() + "/lease.db"
	reported := map[string]lease.Token{} // highest token the child was given, per key
	for round := range rounds {
		lines := crashRound(t, path, round, noLog)
		for _, line := range lines {
			key, tok, ok := strings.Cut(line, " ")
			n, err := strconv.ParseUint(tok, 10, 64)
			if !ok || err != nil {
				t.Fatalf("round %d: child printed %q", round, line)
			}
			if lease.Token(n) <= reported[key] {
				t.Fatalf("round %d: child was given token %d on %s after %d", round, n, key, reported[key])
			}
			reported[key] = lease.Token(n)
		}

		s, err := boltstore.Open(path, opts...)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		for i := range crashKeys {
			key := fmt.Sprintf("crash/%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			// The child's last lease may still be live: wait for its expiry.
			l, err := s.AcquireWait(ctx, key, "parent", time.Minute)
			cancel()
			if err != nil {
				t.Fatalf("round %d: acquire %s after reopen: %v", round, key, err)
			}
			if l.Token <= reported[key] {
				t.Fatalf("round %d: after SIGKILL %s issued token %d, child had been given %d (I1)", round, key, l.Token, reported[key])
			}
			reported[key] = l.Token
			if err := s.Release(context.Background(), l); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		t.Logf("round %d: child reported %d acquisitions before SIGKILL", round, len(lines))
	}
}

// startChild starts this test binary as a child process with env added
// to its environment, and returns it, its standard output and what it
// writes to standard error.
func startChild(t *testing.T, env ...string) (*exec.Cmd, io.Reader, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := new(strings.Builder)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdout, stderr
}

// crashRound runs the child until it has reported a random number of
// acquisitions (none, in the first round: killed while opening or starting),
// kills it with SIGKILL and returns the whole lines it printed.
func crashRound(t *testing.T, path string, round int, noLog bool) []string {
	t.Helper()
	env := []string{childEnv + "=crash:" + path}
	if noLog {
		env = append(env, childNoLogEnv+"=1")
	}
	cmd, stdout, stderr := startChild(t, env...)
	killAfter := 0
	if round > 0 {
		killAfter = 1 + rand.IntN(400)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	if killAfter == 0 {
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // real time: a random moment of the child process's start-up
	}
	for len(lines) < killAfter && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for sc.Scan() { // what the child printed before it died
		if line := sc.Text(); strings.Count(line, " ") == 1 {
			lines = append(lines, line)
		}
	}
	waitKilled(t, cmd, stderr)
	return lines
}

// waitKilled waits for cmd, which must die of the SIGKILL sent to it.
func waitKilled(t *testing.T, cmd *exec.Cmd, stderr *strings.Builder) {
	t.Helper()
	err := cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die of SIGKILL: %v; stderr: %s", err, stderr.String())
	}
}

// storeOpts are the options of a store opened with the log, or without it
// (WithoutLogForBench).
func storeOpts(noLog bool) []boltstore.Option {
	if noLog {
		return []boltstore.Option{boltstore.WithoutLogForBench()}
	}
	return nil
}
