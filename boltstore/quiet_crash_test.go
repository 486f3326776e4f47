package boltstore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
)

// renewTTL is the TTL of renewChild's leases: long enough that the
// parent reopens the store well before the last renewal's expiry.
const renewTTL = 8 * time.Second

// renewChild acquires crashKeys leases on s and renews each, with its own
// TTL (quietly), every millisecond until killed, printing "KEY TOKEN
// EXPIRES" (Unix nanoseconds) after each acquisition and each renewal
// answered.
func renewChild(s *boltstore.Store) {
	var (
		wg  sync.WaitGroup
		out sync.Mutex
	)
	for i := range crashKeys {
		wg.Go(func() {
			key := fmt.Sprintf("renew/%d", i)
			l, err := s.Acquire(context.Background(), key, "child", renewTTL)
			for err == nil {
				out.Lock()
				// One write(2) per line: lines reach the pipe whole.
				fmt.Printf("%s %d %d\n", key, l.Token, l.Expires.UnixNano())
				out.Unlock()
				time.Sleep(time.Millisecond) // real time: a holder renewing, on the real store
				l, err = s.Renew(context.Background(), l, renewTTL)
			}
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		})
	}
	wg.Wait()
}

// promise is the last answer renewChild printed for a key.
type promise struct {
	token   lease.Token
	expires time.Time
}

// renewRound runs renewChild on path for a random time (0 to 2.5 s:
// killed before, between and after checkpoints, which come every second),
// kills it with SIGKILL and returns the last answer it printed for each
// key, and how many it printed.
func renewRound(t *testing.T, path string, noLog bool) (map[string]promise, int) {
	t.Helper()
	env := []string{childEnv + "=renew:" + path}
	if noLog {
		env = append(env, childNoLogEnv+"=1")
	}
	cmd, stdout, stderr := startChild(t, env...)
	last := map[string]promise{}
	lines := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) != 3 {
				continue // cut short by the kill
			}
			tok, err1 := strconv.ParseUint(f[1], 10, 64)
			ns, err2 := strconv.ParseInt(f[2], 10, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			last[f[0]] = promise{lease.Token(tok), time.Unix(0, ns)}
			lines++
		}
	}()
	time.Sleep(time.Duration(rand.IntN(2500)) * time.Millisecond) // real time: a random moment of the child's run
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	waitKilled(t, cmd, stderr)
	return last, lines
}

// checkPromises reopens path after renewRound and reports each key whose
// lease the store would end before the expiry its last answer promised:
// Get's expiry earlier, or (while the promise lasts) a thief's Acquire
// granted.
func checkPromises(t *testing.T, path string, last map[string]promise, opts ...boltstore.Option) []string {
	t.Helper()
	s, err := boltstore.Open(path, opts...)
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	ctx := context.Background()
	var broken []string
	for key, p := range last {
		l, err := s.Get(ctx, key)
		switch {
		case errors.Is(err, lease.ErrNotFound):
			broken = append(broken, fmt.Sprintf("%s: not held after the restart; token %d was promised until %v", key, p.token, p.expires.Format(time.RFC3339Nano)))
			continue
		case err != nil:
			t.Fatal(err)
		case l.Token != p.token:
			t.Fatalf("%s: token %d after the restart, the child's last was %d", key, l.Token, p.token)
		case l.Expires.Before(p.expires):
			broken = append(broken, fmt.Sprintf("%s: expires %v after the restart, %v before the %v promised", key, l.Expires.Format(time.RFC3339Nano), p.expires.Sub(l.Expires), p.expires.Format(time.RFC3339Nano)))
		}
		if _, err := s.Acquire(ctx, key, "thief", time.Second); err == nil && time.Now().Before(p.expires) {
			broken = append(broken, fmt.Sprintf("%s: a thief acquired it after the restart, before the %v promised", key, p.expires.Format(time.RFC3339Nano)))
		}
	}
	return broken
}

// TestQuietRenewalsSurviveSIGKILL kills a child that renews leases
// quietly (no log record, no fdatasync; quiet.go) at random moments and
// reopens its store: every lease must last at least until the expiry of
// the last renewal the child was answered, and nobody else may acquire
// it before then. The negative control opens the same kind of files
// without the grace and must find a broken promise.
func TestQuietRenewalsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	testQuietSIGKILL(t, false)
}

// TestQuietRenewalsSurviveSIGKILLWithoutLog is the same on the log-less
// variant (WithoutLogForBench), where the mark is committed to the bbolt
// file with its batch.
func TestQuietRenewalsSurviveSIGKILLWithoutLog(t *testing.T) {
	t.Parallel()
	testQuietSIGKILL(t, true)
}

func testQuietSIGKILL(t *testing.T, noLog bool) {
	opts := storeOpts(noLog)
	rounds := 8
	if testing.Short() {
		rounds = 2
	}
	checked, answers := 0, 0
	for round := range rounds {
		path := t.TempDir() + "/lease.db"
		last, n := renewRound(t, path, noLog)
		answers += n
		checked += len(last)
		if broken := checkPromises(t, path, last, opts...); len(broken) > 0 {
			t.Fatalf("round %d (%d answers): %s", round, n, strings.Join(broken, "; "))
		}
	}
	t.Logf("%d rounds: %d answers printed before SIGKILL, the last of %d leases checked after reopen", rounds, answers, checked)
}

func TestQuietRenewalsSurviveSIGKILLNegativeControl(t *testing.T) {
	t.Parallel()
	const rounds = 10
	for round := range rounds {
		path := t.TempDir() + "/lease.db"
		last, n := renewRound(t, path, false)
		if broken := checkPromises(t, path, last, boltstore.WithoutQuietGraceForTest()); len(broken) > 0 {
			t.Logf("round %d (%d answers): without the grace the check finds: %s", round, n, broken[0])
			return
		}
	}
	t.Fatalf("without the grace, %d rounds of SIGKILL broke no promise: the check cannot fail", rounds)
}
