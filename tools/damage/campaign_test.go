package damage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/crashtest"
)

// Recipes per run: the short form (make test) does every class to every
// crash state at least once; the long form (make chaos) seven times over.
func recipeCount() int {
	if os.Getenv("LEASE_CHAOS_LONG") != "" {
		return 7 * len(classes) * len(CrashPoints)
	}
	return len(classes) * len(CrashPoints)
}

// TestCampaign is issue 28's damage campaign: every class of damage on
// every crash state, each restart judged against every token the clients
// were given. LEASE_CRASH_SEED=N replays the recipes (the crash states
// themselves vary with timing); LEASE_DAMAGE_TRIALS=1 logs every trial;
// LEASE_DAMAGE_BIN=path judges that lease binary instead of building one;
// LEASE_DAMAGE_CLASSES=zero-db-page,swap runs only those kinds of damage.
func TestCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lease, serves, kills and restarts it hundreds of times; skipped in -short")
	}
	bin := os.Getenv("LEASE_DAMAGE_BIN")
	if bin == "" {
		bin = crashtest.BuildLease(t)
	} else {
		t.Logf("judging %s (LEASE_DAMAGE_BIN)", bin)
	}
	seed := crashtest.Seed(t)
	states := prepare(t, bin, seed)

	t.Run("control", func(t *testing.T) {
		// The negative control: an undamaged copy, judged as if the
		// highest possible token had been issued for every key, must be
		// found to issue one again.
		st := states[0]
		dir := filepath.Join(t.TempDir(), "data")
		if err := st.CopyTo(dir); err != nil {
			t.Fatal(err)
		}
		all := map[string]lease.Token{}
		for k := range st.Issued {
			all[k] = lease.MaxToken
		}
		if got := Judge(t.Context(), bin, dir, all); got.Outcome != Reissued {
			t.Fatalf("an undamaged store judged against MaxToken issued: %v %s; want REISSUED", got.Outcome, got.Detail)
		}
	})

	recipes := Recipes(seed, recipeCount(), CrashPoints)
	if only := os.Getenv("LEASE_DAMAGE_CLASSES"); only != "" {
		want := strings.Split(only, ",")
		for _, c := range want {
			if !slices.Contains(Classes(), c) {
				t.Fatalf("LEASE_DAMAGE_CLASSES: no class %q; the classes are %s", c, strings.Join(Classes(), ","))
			}
		}
		recipes = slices.DeleteFunc(recipes, func(r Recipe) bool { return !slices.Contains(want, r.Class) })
		t.Logf("only the %d recipes of %s (LEASE_DAMAGE_CLASSES)", len(recipes), only)
	}
	trials, err := Run(t.Context(), bin, t.TempDir(), states, recipes, 2)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	perClass, failedPerClass := map[string]int{}, map[string]int{}
	for _, tr := range trials {
		perClass[tr.Recipe.Class]++
		if f := tr.Failure(); f != "" {
			failed = append(failed, f)
			failedPerClass[tr.Recipe.Class]++
		}
		if os.Getenv("LEASE_DAMAGE_TRIALS") != "" {
			t.Logf("%s (%s): %s %s%s", tr.Recipe.Name(), tr.Where, tr.First.Outcome, firstLine(tr.First.Line, tr.First.Detail), recovery(tr.Recovery))
		}
	}
	tally := Count(trials)
	t.Logf("damage campaign, seed %d, %d classes × %d crash states: %v", seed, len(classes), len(CrashPoints), tally)
	if len(failed) > 0 {
		var byClass []string
		for _, c := range Classes() {
			if perClass[c] == 0 {
				continue
			}
			byClass = append(byClass, fmt.Sprintf("%s %d/%d", c, failedPerClass[c], perClass[c]))
		}
		t.Errorf("%d of %d recipes failed (%v)\nfailed per class: %s\n%s", len(failed), len(trials), tally, strings.Join(byClass, ", "), strings.Join(failed, "\n"))
	}
}

func recovery(r *Start) string {
	if r == nil {
		return ""
	}
	return fmt.Sprintf("; %s: %s %s", RecoveryFlag, r.Outcome, firstLine(r.Line, r.Detail))
}

// prepare leaves a data directory in each crash state, two at a time.
func prepare(t *testing.T, bin string, seed uint64) []*State {
	t.Helper()
	root := t.TempDir()
	states := make([]*State, len(CrashPoints))
	errs := make([]error, len(CrashPoints))
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, p := range CrashPoints {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			states[i], errs[i] = Prepare(context.Background(), bin, root, p, seed+uint64(i))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
		st := states[i]
		t.Logf("crash state %s: %d acquisitions, highest tokens %v", st.Name, st.Acquisitions, st.Issued)
	}
	return states
}

// TestRefusalLine checks the judge of a refusal's stderr on each way a
// refusal can fail to be one clear line.
func TestRefusalLine(t *testing.T) {
	data := "/srv/lease"
	logLine := `time=2026-12-06T04:25:23.621Z level=WARN msg="no credentials configured" addr=127.0.0.1:0`
	good := "lease: serve: boltstore: the log /srv/lease/lease.db-wal is damaged at offset 512 (checksum): start with --accept-log-loss to drop it"
	for _, tc := range []struct {
		name  string
		lines []string
		code  int
		clear bool
	}{
		{"one clear line after a log record", []string{logLine, good}, 1, true},
		{"one clear line alone", []string{good}, 1, true},
		{"a fault and a goroutine dump", []string{logLine, "unexpected fault address 0x7faa0bd2e008", "fatal error: fault", "[signal SIGBUS: bus error code=0x2]", "", "goroutine 1 [running]:"}, 2, false},
		{"two lines", []string{good, "lease: and another thing"}, 1, false},
		{"silent", []string{logLine}, 1, false},
		{"ended by a signal", []string{good}, -1, false},
		{"no file named", []string{"lease: serve: the store is damaged; start with --accept-log-loss"}, 1, false},
		{"no way out", []string{"lease: serve: boltstore: /srv/lease/lease.db is damaged"}, 1, false},
		{"not the CLI's line", []string{"boltstore: /srv/lease/lease.db is damaged; start with --accept-log-loss"}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, clear, why := RefusalLine(tc.lines, tc.code, data)
			if clear != tc.clear {
				t.Errorf("RefusalLine(%q) clear = %v (%s), want %v", tc.lines, clear, why, tc.clear)
			}
		})
	}
}

// TestRecipesCoverEveryClassAndState checks the enumeration: the short
// form does every class to every crash state, and a seed gives the same
// recipes again.
func TestRecipesCoverEveryClassAndState(t *testing.T) {
	rs := Recipes(7, len(classes)*len(CrashPoints), CrashPoints)
	seen := map[[2]string]bool{}
	for _, r := range rs {
		seen[[2]string{r.Class, r.State}] = true
	}
	if len(rs) < 60 || len(seen) != len(classes)*len(CrashPoints) {
		t.Fatalf("%d recipes cover %d class×state pairs, want ≥ 60 recipes covering all %d", len(rs), len(seen), len(classes)*len(CrashPoints))
	}
	again := Recipes(7, len(rs), CrashPoints)
	for i := range rs {
		if rs[i] != again[i] {
			t.Fatalf("recipe %d is %v, then %v", i, rs[i], again[i])
		}
	}
}
