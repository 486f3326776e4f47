// Command benchreport runs the comparison benchmarks and writes
// docs/BENCHMARKS.md (`make bench`):
//
//	cd tools && go run ./benchreport -out ../docs/BENCHMARKS.md [-pkg ./memstore] [-benchtime 1s] [-count 3]
//
// It finds every package of both modules (the library and tools/, package
// patterns relative to the repository's root) with a BenchmarkCompare*
// function and, in -count
// rounds, runs `go test -run '^$' -bench … -benchmem -count 1` on each in
// turn and times the seed's TypeScript LeaseStore under Node.js on the same
// work (scripts/seedbench). It writes the fastest round of each benchmark
// (the spread in brackets), one table per group,
// named by the convention of internal/testkit/benchutil:
//
//	BenchmarkCompare<Group>/c=<clients>/<impl>
//
// The first impl of each group and client count is its baseline; the seed's
// rows come first. Targets (targets.go) are checked and printed as met or
// NOT met. A benchmark can name the engine it measured by logging
// `b.Logf("engine: %s %s", name, version)`; those lines are listed under the
// machine.
//
// The report is written even when a package fails; the exit status is then 1.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	if err := mainErr(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

type config struct {
	out, bench, pkgs, benchtime, seed string
	count                             int
}

func mainErr(args []string) error {
	fs := flag.NewFlagSet("benchreport", flag.ContinueOnError)
	var cfg config
	fs.StringVar(&cfg.out, "out", "", "write the report to this file (default: standard output)")
	fs.StringVar(&cfg.bench, "bench", "^BenchmarkCompare", "go test -bench regexp")
	fs.StringVar(&cfg.pkgs, "pkg", "./...,./tools/...", "comma-separated package patterns, relative to the repository's root, to search for BenchmarkCompare*")
	fs.StringVar(&cfg.benchtime, "benchtime", "1s", "go test -benchtime, also used for the seed")
	fs.IntVar(&cfg.count, "count", 3, "rounds of every benchmark (go test -count 1 and the seed, interleaved); the report shows the fastest")
	fs.StringVar(&cfg.seed, "seed", "", "the seed's fencing-token.ts (default $LEASE_SEED_TS or ../shared/seed/fencing-token.ts); \"off\" skips it")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("benchreport: unexpected arguments %q", fs.Args())
	}
	if cfg.count < 1 {
		return fmt.Errorf("benchreport: -count %d: want at least 1", cfg.count)
	}
	if _, err := regexp.Compile(cfg.bench); err != nil {
		return fmt.Errorf("benchreport: -bench: %v", err)
	}
	if cfg.seed == "" {
		cfg.seed = os.Getenv("LEASE_SEED_TS")
	}
	// Paths given are relative to the working directory; the work is done
	// from the repository's root, where the default seed path is relative to.
	for _, p := range []*string{&cfg.out, &cfg.seed} {
		if *p != "" && *p != "off" {
			abs, err := filepath.Abs(*p)
			if err != nil {
				return err
			}
			*p = abs
		}
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	if cfg.seed == "" {
		cfg.seed = filepath.Join("..", "shared", "seed", "fencing-token.ts")
	}
	pkgs, err := comparePackages(strings.Split(cfg.pkgs, ","))
	if err != nil {
		return err
	}
	if len(pkgs) == 0 {
		return fmt.Errorf("benchreport: no package under %s has a BenchmarkCompare function", cfg.pkgs)
	}
	procs := defaultProcs()
	rep := &Report{
		Date:    time.Now(),
		Machine: machine(procs),
		Command: "cd tools && " + shellJoin(append([]string{"go", "run", "./benchreport"}, args...)),
		Groups:  groupNotes,
	}

	var seed *seedBench
	if cfg.seed == "off" {
		rep.Notes = append(rep.Notes, "seed-node rows skipped: -seed off")
	} else {
		var skip string
		if seed, skip = prepareSeed(cfg.seed); seed == nil {
			rep.Notes = append(rep.Notes, skip)
			fmt.Fprintln(os.Stderr, "benchreport:", skip)
		} else {
			defer seed.close()
		}
	}

	// Rounds interleave the Go packages and the seed, so that a slow spell
	// of the shared machine falls on both sides of a comparison.
	var goOut, seedOut bytes.Buffer
	var failed []string
	for round := range cfg.count {
		for _, pkg := range pkgs {
			argv := []string{"go", "test", "-run", "^$", "-bench", cfg.bench, "-benchmem",
				"-benchtime", cfg.benchtime, "-count", "1", "-timeout", "60m", pkg.path}
			run := shellJoin(argv)
			if pkg.dir != "." {
				run = "cd " + pkg.dir + " && " + run
			}
			if round == 0 {
				rep.Runs = append(rep.Runs, run)
			}
			fmt.Fprintf(os.Stderr, "benchreport: round %d/%d: %s\n", round+1, cfg.count, run)
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Dir = pkg.dir
			cmd.Stdout = io.MultiWriter(&goOut, os.Stderr)
			cmd.Stderr = os.Stderr
			if err := cmd.Run(); err != nil && !slices.Contains(failed, pkg.path) {
				failed = append(failed, pkg.path)
				rep.Notes = append(rep.Notes, fmt.Sprintf("`go test` of %s failed (%v): its rows may be missing", pkg.path, err))
			}
		}
		if seed == nil {
			continue
		}
		if round == 0 {
			rep.Runs = append(rep.Runs, seed.cmds...)
			rep.Runs = append(rep.Runs, seed.show(seed.driver(cfg.benchtime, procs)))
		}
		fmt.Fprintf(os.Stderr, "benchreport: round %d/%d: the seed under Node.js\n", round+1, cfg.count)
		out, err := seed.run(cfg.benchtime, procs)
		if err != nil {
			skip := "seed-node rows skipped: " + err.Error()
			rep.Notes = append(rep.Notes, skip)
			fmt.Fprintln(os.Stderr, "benchreport:", skip)
			seedOut.Reset()
			seed.close()
			seed = nil
			continue
		}
		os.Stderr.Write(out)
		seedOut.Write(out)
	}
	if cfg.count > 1 {
		rep.Runs = append(rep.Runs, fmt.Sprintf("(the go test and node commands above in %d rounds, interleaved)", cfg.count))
	}

	goParsed, err := Parse(bytes.NewReader(goOut.Bytes()), procs)
	if err != nil {
		return err
	}
	seedParsed, err := Parse(bytes.NewReader(seedOut.Bytes()), procs)
	if err != nil {
		return err
	}
	for _, e := range goParsed.Engines {
		rep.Machine = append(rep.Machine, "engine: "+e)
	}
	samples := keepGroups(seedParsed.Samples, goParsed.Samples)
	rep.Results = Aggregate(append(samples, goParsed.Samples...))
	rep.Outcomes = Evaluate(relevantTargets(Targets, rep.Results), rep.Results, procs)
	rep.Raw = benchLines(append(seedOut.Bytes(), goOut.Bytes()...))

	w := io.Writer(os.Stdout)
	if cfg.out != "" {
		f, err := os.Create(cfg.out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	if err := rep.Write(w); err != nil {
		return err
	}
	if len(failed) > 0 {
		return fmt.Errorf("benchreport: go test failed in %s", strings.Join(failed, ", "))
	}
	return nil
}

// mainModule is the library's module path; the repository's root is the
// directory of its go.mod, and tools/ a module of its own inside it.
const mainModule = "github.com/leasehq/lease"

// repoRoot is the directory of the library's go.mod: the working
// directory's module if it is the library, or the nearest directory above it
// whose go.mod declares the library (benchreport itself runs in tools/).
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("benchreport: go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("benchreport: run inside the repository")
	}
	for dir := filepath.Dir(gomod); ; dir = filepath.Dir(dir) {
		if modulePath(filepath.Join(dir, "go.mod")) == mainModule {
			return dir, nil
		}
		if dir == filepath.Dir(dir) {
			return "", fmt.Errorf("benchreport: no go.mod of %s at or above %s", mainModule, filepath.Dir(gomod))
		}
	}
}

// modulePath is the module a go.mod declares, or "" if it cannot be read.
func modulePath(gomod string) string {
	src, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(src)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// benchPackage is a package with BenchmarkCompare functions: its import path
// and the directory of its module, relative to the repository's root, where
// `go test` of it runs.
type benchPackage struct{ path, dir string }

// moduleDir is the directory, relative to the working directory (the
// repository's root), of the module a package pattern falls in: the nearest
// directory at or above the pattern's fixed part that holds a go.mod.
func moduleDir(pattern string) string {
	dir := filepath.Clean(strings.TrimSuffix(strings.TrimSuffix(pattern, "..."), "/"))
	for ; dir != "." && dir != string(filepath.Separator); dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
	}
	return "."
}

var compareFuncRE = regexp.MustCompile(`(?m)^func BenchmarkCompare\w*\(`)

// comparePackages lists the packages matching patterns whose test files
// define a BenchmarkCompare function, so new backends' benchmarks are picked
// up without editing this program. Each pattern is listed in the module it
// falls in (a pattern of the library's such as ./... does not reach into
// tools/, which is a module of its own). Packages that do not load are
// skipped here; `go vet` and `make test` report them.
func comparePackages(patterns []string) ([]benchPackage, error) {
	var pkgs []benchPackage
	for _, pattern := range patterns {
		dir := moduleDir(pattern)
		rel, err := filepath.Rel(dir, pattern)
		if err != nil {
			return nil, fmt.Errorf("benchreport: -pkg %s: %v", pattern, err)
		}
		// A package path relative to the module (filepath.Rel cleans
		// "./..." to "...", which go list reads as every package it
		// knows, the standard library's included).
		if rel = filepath.ToSlash(rel); rel != "." {
			rel = "./" + rel
		}
		cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,TestGoFiles,XTestGoFiles", rel)
		cmd.Dir = dir
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("benchreport: go list %s (in %s): %v", rel, dir, err)
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for dec.More() {
			var p struct {
				ImportPath, Dir           string
				TestGoFiles, XTestGoFiles []string
			}
			if err := dec.Decode(&p); err != nil {
				return nil, fmt.Errorf("benchreport: go list output: %v", err)
			}
			for _, f := range slices.Concat(p.TestGoFiles, p.XTestGoFiles) {
				src, err := os.ReadFile(filepath.Join(p.Dir, f))
				if err == nil && compareFuncRE.Match(src) {
					pkgs = append(pkgs, benchPackage{path: p.ImportPath, dir: dir})
					break
				}
			}
		}
	}
	return pkgs, nil
}

// keepGroups returns the seed samples of groups the Go run measured, so a
// run filtered to other packages shows no orphan seed rows.
func keepGroups(seed, goSamples []sample) []sample {
	var out []sample
	for _, s := range seed {
		if slices.ContainsFunc(goSamples, func(g sample) bool { return g.group == s.group }) {
			out = append(out, s)
		}
	}
	return out
}

// relevantTargets drops targets of groups absent from the run.
func relevantTargets(targets []Target, results []Result) []Target {
	var out []Target
	for _, t := range targets {
		if slices.ContainsFunc(results, func(r Result) bool { return r.Group == t.Group }) {
			out = append(out, t)
		}
	}
	return out
}

// benchLines keeps the result lines of raw benchmark output.
func benchLines(raw []byte) string {
	var b strings.Builder
	for line := range strings.Lines(string(raw)) {
		if strings.HasPrefix(line, "Benchmark") {
			b.WriteString(line)
		}
	}
	return b.String()
}
