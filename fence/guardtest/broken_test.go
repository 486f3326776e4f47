package guardtest

// The negative control: each broken guard below is a correct reference
// guard with one thing wrong, and the suite must fail it. A suite that
// passes a broken guard proves nothing about the real ones.
//
// TestBrokenGuardsFail runs this test binary again once per broken guard,
// with GUARDTEST_BROKEN naming it, so that the suite's failure is the
// child's exit status rather than this test's. The unbroken reference,
// "Control", must pass.

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

const envBroken = "GUARDTEST_BROKEN"

// ref is a correct fence.Guard, unless bug names one of the broken ones.
type ref struct {
	mode    fence.Mode
	bug     string
	mu      sync.Mutex
	highest map[string]lease.Token
}

func newRef(mode fence.Mode, bug string) *ref {
	return &ref{mode: mode, bug: bug, highest: make(map[string]lease.Token)}
}

func (g *ref) Check(ctx context.Context, resource string, token lease.Token, write func() error) error {
	if g.bug != "InvalidTokenAdmitted" {
		if err := fence.ValidateToken(token); err != nil {
			return err
		}
	}
	if g.bug != "IgnoresContext" {
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	key := resource
	switch g.bug {
	case "OneMarkForAll":
		key = ""
	case "FoldsCase":
		key = strings.ToLower(resource)
	case "TruncatesNames":
		key = resource[:min(len(resource), 255)]
	case "ComposesAccents":
		key = strings.ReplaceAll(resource, "e\u0301", "\u00e9")
	}
	g.mu.Lock()
	h, ok := g.highest[key]
	if !ok && g.bug == "FreshMarkIsOne" {
		h = 1
	}
	admits := g.mode.Admits(token, h)
	switch g.bug {
	case "StrictAdmitsEqual":
		admits = token >= h
	case "AtLeastRejectsEqual":
		admits = token > h
	}
	if !admits {
		switch g.bug {
		case "RecordsRejected":
			g.highest[key] = token
		case "RunsRejectedWrite":
			_ = write()
		}
		g.mu.Unlock()
		switch g.bug {
		case "NotStale":
			return errors.New("ref: rejected")
		case "WrongHighest":
			h = token
		}
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: h, Mode: g.mode}
	}
	if g.bug == "WritesUnlocked" {
		// Checked, then written and recorded outside the lock: not atomic.
		g.mu.Unlock()
		err := write()
		g.mu.Lock()
		if err == nil {
			g.highest[key] = token
		}
		g.mu.Unlock()
		return err
	}
	defer g.mu.Unlock()
	err := write()
	if err == nil || g.bug == "RecordsFailedWrite" {
		g.highest[key] = token
	}
	return err
}

// refValues is a correct ValueGuard, unless bug names a broken one.
type refValues struct {
	mode fence.Mode
	bug  string
	mu   sync.Mutex
	m    map[string]stored
}

func (g *refValues) Set(ctx context.Context, resource string, token lease.Token, value string) error {
	if err := fence.ValidateToken(token); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	cur := g.m[resource]
	if !g.mode.Admits(token, cur.token) {
		if g.bug == "SetsValueOnReject" {
			g.m[resource] = stored{value, cur.token}
		}
		return &fence.StaleTokenError{Resource: resource, Token: token, Highest: cur.token, Mode: g.mode}
	}
	g.m[resource] = stored{value, token}
	return nil
}

func (g *refValues) Get(_ context.Context, resource string) (string, lease.Token, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.m[resource]
	if !ok {
		return "", 0, lease.ErrNotFound
	}
	return s.value, s.token, nil
}

type broken struct {
	name     string
	breaks   string
	value    bool     // a ValueGuard, run by TestValueGuard; else a Guard, by TestGuard
	caughtBy []string // checks of which at least one must fail
}

var brokenGuards = []broken{
	{name: "StrictAdmitsEqual", breaks: "Strict admits a token equal to the highest",
		caughtBy: []string{"AdmitsByMode", "TokenEdges", "RejectedCheckRunsNothing"}},
	{name: "AtLeastRejectsEqual", breaks: "AtLeast rejects a token equal to the highest",
		caughtBy: []string{"AdmitsByMode", "TokenEdges"}},
	{name: "RecordsRejected", breaks: "a rejected token is recorded as the highest",
		caughtBy: []string{"AdmitsByMode", "ConcurrentWriters"}},
	{name: "RunsRejectedWrite", breaks: "a rejected Check runs its write",
		caughtBy: []string{"AdmitsByMode", "RejectedCheckRunsNothing"}},
	{name: "NotStale", breaks: "a rejection is a plain error, not a StaleTokenError",
		caughtBy: []string{"AdmitsByMode"}},
	{name: "WrongHighest", breaks: "a StaleTokenError names the rejected token as the highest",
		caughtBy: []string{"AdmitsByMode"}},
	{name: "OneMarkForAll", breaks: "one highest token for every resource",
		caughtBy: []string{"ResourcesIndependent"}},
	{name: "FoldsCase", breaks: "names that differ only in case share one mark",
		caughtBy: []string{"ResourcesIndependent"}},
	{name: "TruncatesNames", breaks: "names are cut to 255 bytes, so long ones with a common prefix share one mark",
		caughtBy: []string{"ResourcesIndependent"}},
	{name: "ComposesAccents", breaks: "a decomposed accent (e + U+0301) names the same resource as the composed letter",
		caughtBy: []string{"ResourcesIndependent"}},
	{name: "FreshMarkIsOne", breaks: "a resource never written starts with highest token 1, not 0",
		caughtBy: []string{"NeverWritten", "TokenEdges"}},
	{name: "InvalidTokenAdmitted", breaks: "token 0 and tokens above MaxToken are admitted",
		caughtBy: []string{"TokenEdges"}},
	{name: "IgnoresContext", breaks: "a Check whose context has ended writes",
		caughtBy: []string{"CancelledContext"}},
	{name: "RecordsFailedWrite", breaks: "the token of a failed write is recorded",
		caughtBy: []string{"FailedWriteRecordsNothing"}},
	{name: "WritesUnlocked", breaks: "check, write and record are not one atomic step",
		caughtBy: []string{"WritesOneAtATime", "ConcurrentWriters"}},
	{name: "SetsValueOnReject", breaks: "a rejected Set stores its value", value: true,
		caughtBy: []string{"AdmitsByMode"}},
}

func findBroken(name string) (broken, bool) {
	switch name {
	case "Control", "ControlValues":
		return broken{name: name, value: name == "ControlValues"}, true
	}
	for _, b := range brokenGuards {
		if b.name == name {
			return b, true
		}
	}
	return broken{}, false
}

var failLine = regexp.MustCompile(`--- FAIL: TestBrokenGuardsFail/[^/\s]+/(\S+)`)

// TestBrokenGuardsFail checks that the suite fails every broken guard and
// passes the reference. In a child process it started (GUARDTEST_BROKEN
// set), it is instead the suite run on that one guard.
func TestBrokenGuardsFail(t *testing.T) {
	if name := os.Getenv(envBroken); name != "" {
		b, ok := findBroken(name)
		if !ok {
			t.Fatalf("no broken guard %q", name)
		}
		if b.value {
			TestValueGuard(t, func(t *testing.T, mode fence.Mode) ValueGuard {
				return &refValues{mode: mode, bug: b.name, m: make(map[string]stored)}
			})
			return
		}
		TestGuard(t, func(t *testing.T, mode fence.Mode) fence.Guard { return newRef(mode, b.name) })
		return
	}
	names := []string{"Control", "ControlValues"}
	for _, b := range brokenGuards {
		names = append(names, b.name)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, _ := findBroken(name)
			start := time.Now()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenGuardsFail$", "-test.count=1", "-test.timeout=120s")
			cmd.Env = append(os.Environ(), envBroken+"="+name)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if b.caughtBy == nil {
				if err != nil {
					t.Fatalf("the suite fails the unbroken reference (%v in %v):\n%s", err, time.Since(start), out.String())
				}
				return
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("the suite passes a guard where %s (child: %v)", b.breaks, err)
			}
			var failed []string
			for _, m := range failLine.FindAllStringSubmatch(out.String(), -1) {
				if check, _, _ := strings.Cut(m[1], "/"); !slices.Contains(failed, check) {
					failed = append(failed, check)
				}
			}
			if !slices.ContainsFunc(b.caughtBy, func(c string) bool { return slices.Contains(failed, c) }) {
				t.Fatalf("the child failed in %v, but not in %v:\n%s", failed, b.caughtBy, out.String())
			}
			t.Logf("caught by %v", failed)
		})
	}
}
