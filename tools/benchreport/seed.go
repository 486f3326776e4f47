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

// seedBench is the seed transpiled in a throwaway folder, ready to be timed
// by scripts/seedbench/bench.mjs. The seed stays outside the repository: it
// is read at run time, never copied in.
type seedBench struct {
	dir    string   // the throwaway folder
	module string   // the transpiled seed, exporting SeedLeaseStore
	cmds   []string // what was run, for the report
}

// prepareSeed transpiles the seed's TypeScript with a pinned esbuild. On
// failure it returns why the seed's rows are skipped.
func prepareSeed(seedPath string) (*seedBench, string) {
	src, err := os.ReadFile(seedPath)
	if err != nil {
		return nil, fmt.Sprintf("seed-node rows skipped: cannot read the seed (%v); pass -seed or set LEASE_SEED_TS", err)
	}
	for _, tool := range []string{"node", "npx"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Sprintf("seed-node rows skipped: %s not found (install Node.js, e.g. apt-get install nodejs npm)", tool)
		}
	}
	dir, err := os.MkdirTemp("", "benchreport-seed-")
	if err != nil {
		return nil, "seed-node rows skipped: " + err.Error()
	}
	sb := &seedBench{dir: dir, module: filepath.Join(dir, "seed.mjs")}
	ts := filepath.Join(dir, "seed.ts")
	if err := os.WriteFile(ts, append(src, seedExport...), 0o600); err != nil {
		sb.close()
		return nil, "seed-node rows skipped: " + err.Error()
	}
	esbuild := []string{"npx", "--yes", "esbuild@" + esbuildVersion, ts, "--format=esm", "--log-level=warning", "--outfile=" + sb.module}
	sb.cmds = append(sb.cmds,
		"cp "+seedPath+" $TMP/seed.ts && echo '"+strings.TrimSpace(seedExport)+"' >> $TMP/seed.ts",
		sb.show(esbuild))
	if _, err := run(dir, esbuild); err != nil {
		sb.close()
		return nil, "seed-node rows skipped: transpiling the seed failed: " + err.Error()
	}
	return sb, ""
}

// driver is the command that times the seed at 1 and procs clients.
func (sb *seedBench) driver(benchtime string, procs int) []string {
	return []string{"node", "scripts/seedbench/bench.mjs", sb.module,
		"--benchtime", benchtime, "--count", "1", "--clients", clientList(procs), "--procs", fmt.Sprint(procs)}
}

// run times the seed once, from the module root, and returns benchmark lines.
func (sb *seedBench) run(benchtime string, procs int) ([]byte, error) {
	out, err := run(".", sb.driver(benchtime, procs))
	if err != nil {
		return nil, fmt.Errorf("the Node.js driver failed: %v", err)
	}
	return out, nil
}

// show prints argv for the report, with the throwaway folder as $TMP.
func (sb *seedBench) show(argv []string) string {
	return strings.ReplaceAll(shellJoin(argv), sb.dir, "$TMP")
}

func (sb *seedBench) close() { os.RemoveAll(sb.dir) }

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
