package damage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/crashtest"
	"github.com/leasehq/lease/leasehttp"
)

// RecoveryFlag is the flag a refusal must name as the way out, and that
// must then start the store with tokens above every one issued.
const RecoveryFlag = "--accept-log-loss"

// Outcome is the judgement of one start of a damaged store.
type Outcome int

const (
	// Clean: it started, and every token it issued for a key was above
	// every token ever issued for that key.
	Clean Outcome = iota
	// Refused: it exited non-zero before serving.
	Refused
	// Reissued: it issued a token at or below one already issued for its
	// key (I1 broken): the failure the campaign looks for.
	Reissued
	// Broken: it exited 0, or neither served nor exited within startBound,
	// or started but could not grant a key.
	Broken
)

func (o Outcome) String() string {
	return [...]string{"CLEAN", "REFUSED", "REISSUED", "BROKEN"}[o]
}

// Start is how one start went.
type Start struct {
	Outcome Outcome
	// Line is a refusal's message line; Clear says whether it was the one
	// line on stderr besides log records, naming a store file and
	// RecoveryFlag, and Why says what it lacked if not.
	Line  string
	Clear bool
	Why   string
	// Detail is what a start that served issued, or what went wrong.
	Detail string
}

// Trial is what one recipe did.
type Trial struct {
	Recipe Recipe
	// Where says where the damage struck.
	Where string
	// First is the start on the damaged files; Recovery, after a refusal,
	// the start with RecoveryFlag.
	First    Start
	Recovery *Start
}

// Failure says why t failed, or "" if it did not: a token issued again, a
// refusal that is not one clear line, a start that neither refused nor
// served, or a refusal that RecoveryFlag does not get past.
func (t Trial) Failure() string {
	var bad []string
	switch t.First.Outcome {
	case Reissued, Broken:
		bad = append(bad, t.First.Outcome.String()+" "+t.First.Detail)
	case Refused:
		if !t.First.Clear {
			bad = append(bad, "refused unclearly: "+t.First.Why)
		}
		switch r := t.Recovery; {
		case r == nil:
		case r.Outcome == Refused && r.Line == t.First.Line:
			bad = append(bad, RecoveryFlag+" refused the same")
		case r.Outcome == Refused:
			bad = append(bad, RecoveryFlag+" refused: "+clip(firstLine(r.Line, r.Why), 100))
		case r.Outcome != Clean:
			bad = append(bad, RecoveryFlag+" "+r.Outcome.String()+" "+r.Detail)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	return fmt.Sprintf("%s (%s): %s", t.Recipe.Name(), t.Where, strings.Join(bad, "; "))
}

func firstLine(line, why string) string {
	if line != "" {
		return line
	}
	return why
}

// Run runs every recipe on a copy of its crash state under scratch, workers
// at a time, and returns the trials in recipe order.
func Run(ctx context.Context, bin, scratch string, states []*State, recipes []Recipe, workers int) ([]Trial, error) {
	byName := map[string]*State{}
	for _, s := range states {
		byName[s.Name] = s
	}
	trials := make([]Trial, len(recipes))
	errs := make([]error, len(recipes))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				trials[i], errs[i] = RunTrial(ctx, bin, filepath.Join(scratch, fmt.Sprint(i)), byName[recipes[i].State], states, recipes[i])
			}
		})
	}
	for i := range recipes {
		next <- i
	}
	close(next)
	wg.Wait()
	return trials, errors.Join(errs...)
}

// RunTrial copies st into dir, applies r, starts the store and judges it;
// after a refusal it starts it again with RecoveryFlag and judges that. An
// error is the harness's own failure, not the store's. dir is removed.
func RunTrial(ctx context.Context, bin, dir string, st *State, states []*State, r Recipe) (Trial, error) {
	defer os.RemoveAll(dir)
	t := Trial{Recipe: r}
	data := filepath.Join(dir, "data")
	if err := st.CopyTo(data); err != nil {
		return t, err
	}
	where, err := r.Apply(data, st, states)
	if err != nil {
		return t, fmt.Errorf("damage: %s: %w", r.Name(), err)
	}
	t.Where = where
	// A floor taken from the host clock at Open (the store's defence
	// against a rollback of both files) holds only while the clock is
	// ahead of every grant: were it not, the judgement would prove nothing.
	if now := time.Now(); !now.After(st.LastGrant) {
		return t, fmt.Errorf("damage: %s: the clock (%v) is not past the last grant (%v): no judgement", r.Name(), now, st.LastGrant)
	}
	t.First = Judge(ctx, bin, data, st.Issued)
	if t.First.Outcome == Refused {
		rec := Judge(ctx, bin, data, st.Issued, RecoveryFlag)
		t.Recovery = &rec
	}
	return t, nil
}

// Judge starts `bin serve` on data with flags and judges the start against
// issued, the highest token ever issued per key: a refusal's stderr, or,
// if it serves, two acquisitions of every key, each of whose tokens must be
// above issued and above the one before.
func Judge(ctx context.Context, bin, data string, issued map[string]lease.Token, flags ...string) Start {
	srv, err := crashtest.StartServe(bin, data, startBound, flags...)
	if errors.Is(err, crashtest.ErrExited) {
		code := srv.ExitCode()
		if code == 0 {
			return Start{Outcome: Broken, Detail: "exited 0 without serving: " + srv.Log()}
		}
		// Every trial has a data directory of its own: say $DATA.
		lines := srv.Lines()
		for i := range lines {
			lines[i] = strings.ReplaceAll(lines[i], data, "$DATA")
		}
		s := Start{Outcome: Refused}
		s.Line, s.Clear, s.Why = RefusalLine(lines, code, "$DATA")
		return s
	}
	if err != nil {
		return Start{Outcome: Broken, Detail: err.Error()}
	}
	defer srv.Kill()
	c, err := leasehttp.NewClient(srv.URL, leasehttp.WithTimeout(5*time.Second))
	if err != nil {
		return Start{Outcome: Broken, Detail: err.Error()}
	}
	defer c.Close()
	above := maps.Clone(issued)
	var got []string
	for range 2 {
		for _, key := range slices.Sorted(maps.Keys(issued)) {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l, err := c.AcquireWait(wctx, key, "judge", 2*time.Second)
			cancel()
			if err != nil {
				return Start{Outcome: Broken, Detail: fmt.Sprintf("started, but acquiring %q: %v; the server's last error: %s", key, err, lastError(srv.Lines()))}
			}
			if l.Token <= above[key] {
				return Start{Outcome: Reissued, Detail: fmt.Sprintf("%s got token %d, but %d was issued before", key, l.Token, above[key])}
			}
			above[key] = l.Token
			got = append(got, fmt.Sprintf("%s:%d>%d", key, l.Token, issued[key]))
			if err := c.Release(ctx, l); err != nil {
				return Start{Outcome: Broken, Detail: fmt.Sprintf("started, but releasing %q: %v", key, err)}
			}
		}
	}
	return Start{Outcome: Clean, Detail: strings.Join(got, " ")}
}

// lastError is the last ERROR record of a server's log, or "none".
func lastError(lines []string) string {
	for _, l := range slices.Backward(lines) {
		if strings.Contains(l, " level=ERROR ") {
			return clip(l, 300)
		}
	}
	return "none"
}

// logRecord is a line of the server's own structured log (log/slog's text
// handler), which may precede a refusal.
var logRecord = regexp.MustCompile(`^time=\S+ level=[A-Z]+ msg=`)

// RefusalLine finds the message of a server that exited with code before
// serving the store in data, and says whether it was clear: the one line
// on stderr that is not a log record, starting "lease: ", naming a file of
// the store (its path) and RecoveryFlag as the way out; no goroutine dump,
// no fault, no second line. why says what it lacked.
func RefusalLine(lines []string, code int, data string) (line string, clear bool, why string) {
	var msgs []string
	for _, l := range lines {
		if !logRecord.MatchString(l) {
			msgs = append(msgs, l)
		}
	}
	if len(msgs) > 0 {
		line = msgs[0]
	}
	switch {
	case code < 0:
		return line, false, "ended by a signal"
	case len(msgs) == 0:
		return "", false, "exited " + fmt.Sprint(code) + " and said nothing"
	case len(msgs) > 1:
		return line, false, fmt.Sprintf("%d lines: %q", len(msgs), clip(strings.Join(msgs, " | "), 100))
	case !strings.HasPrefix(line, "lease: "):
		return line, false, fmt.Sprintf("not a lease: line: %q", clip(line, 100))
	case !strings.Contains(line, filepath.Join(data, DBFile)):
		return line, false, fmt.Sprintf("names no file of the store: %q", clip(line, 100))
	case !strings.Contains(line, RecoveryFlag):
		return line, false, fmt.Sprintf("does not name %s: %q", RecoveryFlag, clip(line, 100))
	}
	return line, true, ""
}

func clip(s string, n int) string {
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// Tally counts trials by outcome.
type Tally struct {
	Trials, Refused, Unclear, Clean, Reissued, Broken int
	// After the refusals, with RecoveryFlag.
	Recovered, RecoveryReissued, RecoveryRefused, RecoveryBroken int
}

// Count tallies trials.
func Count(trials []Trial) Tally {
	var c Tally
	c.Trials = len(trials)
	for _, t := range trials {
		switch t.First.Outcome {
		case Clean:
			c.Clean++
		case Reissued:
			c.Reissued++
		case Broken:
			c.Broken++
		case Refused:
			c.Refused++
			if !t.First.Clear {
				c.Unclear++
			}
			if r := t.Recovery; r != nil {
				switch r.Outcome {
				case Clean:
					c.Recovered++
				case Reissued:
					c.RecoveryReissued++
				case Refused:
					c.RecoveryRefused++
				case Broken:
					c.RecoveryBroken++
				}
			}
		}
	}
	return c
}

func (c Tally) String() string {
	return fmt.Sprintf("%d trials: %d refused (%d not one clear line), %d clean, %d reissued, %d broken; %s after the refusals: %d started with every token above, %d reissued, %d refused again, %d broken",
		c.Trials, c.Refused, c.Unclear, c.Clean, c.Reissued, c.Broken, RecoveryFlag, c.Recovered, c.RecoveryReissued, c.RecoveryRefused, c.RecoveryBroken)
}
