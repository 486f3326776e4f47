package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// esbuildVersion is pinned so that every run transpiles the seed the same way.
const esbuildVersion = "0.24.0"

// seedExport is appended to the throwaway copy of the seed, which declares
// LeaseStore without exporting it.
const seedExport = "\nexport { LeaseStore as SeedLeaseStore };\n"

// seedRun is the outcome of running the seed's LeaseStore under Node.js.
type seedRun struct {
	out  []byte   // benchmark lines
	cmds []string // what was run
	skip string   // why there are no seed rows, if there are none
}

// runSeed transpiles the seed's TypeScript in a temporary folder and times
// its LeaseStore with scripts/seedbench/bench.mjs. The seed stays outside the
// repository: it is read at run time, never copied in.
func runSeed(seedPath, benchtime string, count, procs int) seedRun {
	var r seedRun
	src, err := os.ReadFile(seedPath)
	if err != nil {
		r.skip = fmt.Sprintf("seed-node rows skipped: cannot read the seed (%v); pass -seed or set LEASE_SEED_TS", err)
		return r
	}
	for _, tool := range []string{"node", "npx"} {
		if _, err := exec.LookPath(tool); err != nil {
			r.skip = fmt.Sprintf("seed-node rows skipped: %s not found (install Node.js, e.g. apt-get install nodejs npm)", tool)
			return r
		}
	}
	tmp, err := os.MkdirTemp("", "benchreport-seed-")
	if err != nil {
		r.skip = "seed-node rows skipped: " + err.Error()
		return r
	}
	defer os.RemoveAll(tmp)
	ts := filepath.Join(tmp, "seed.ts")
	if err := os.WriteFile(ts, append(src, seedExport...), 0o600); err != nil {
		r.skip = "seed-node rows skipped: " + err.Error()
		return r
	}
	mod := filepath.Join(tmp, "seed.mjs")
	esbuild := []string{"npx", "--yes", "esbuild@" + esbuildVersion, ts, "--format=esm", "--log-level=warning", "--outfile=" + mod}
	show := func(argv []string) string { return strings.ReplaceAll(shellJoin(argv), tmp, "$TMP") }
	r.cmds = append(r.cmds, "cp "+seedPath+" $TMP/seed.ts && echo '"+strings.TrimSpace(seedExport)+"' >> $TMP/seed.ts")
	r.cmds = append(r.cmds, show(esbuild))
	if _, err := run(tmp, esbuild); err != nil {
		r.skip = "seed-node rows skipped: transpiling the seed failed: " + err.Error()
		return r
	}
	driver := []string{"node", "scripts/seedbench/bench.mjs", mod,
		"--benchtime", benchtime, "--count", fmt.Sprint(count), "--clients", clientList(procs), "--procs", fmt.Sprint(procs)}
	r.cmds = append(r.cmds, show(driver))
	out, err := run(".", driver)
	if err != nil {
		r.skip = "seed-node rows skipped: the Node.js driver failed: " + err.Error()
		return r
	}
	r.out = out
	return r
}

// clientList is the client counts the Go benchmarks use: 1 and GOMAXPROCS.
func clientList(procs int) string {
	if procs > 1 {
		return fmt.Sprintf("1,%d", procs)
	}
	return "1"
}

// run runs argv in dir and returns its stdout; stderr goes to the error.
func run(dir string, argv []string) ([]byte, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s: %v: %s", argv[0], err, lastLines(stderr.String(), 5))
	}
	return out, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}

// shellJoin quotes argv for display as a shell command.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool { return !isPlain(r) }) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

func isPlain(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=,:@+", r)
}
