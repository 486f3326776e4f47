package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
)

// machine describes where the benchmarks ran, one "what: value" per line,
// leaving out what it cannot find.
func machine(procs int) []string {
	lines := []string{
		fmt.Sprintf("cpu: %s, %d logical cores, GOMAXPROCS %d", orUnknown(cpuModel()), runtime.NumCPU(), procs),
	}
	if mem := memTotal(); mem != "" {
		lines = append(lines, "memory: "+mem)
	}
	osLine := "os: " + runtime.GOOS + "/" + runtime.GOARCH
	if rel, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		osLine += ", kernel " + strings.TrimSpace(string(rel))
	}
	lines = append(lines, osLine, "go: "+runtime.Version())
	if v := commandOutput("node", "--version"); v != "" {
		if v8 := commandOutput("node", "-p", "process.versions.v8"); v8 != "" {
			v += " (V8 " + v8 + ")"
		}
		lines = append(lines, "node: "+v+", esbuild "+esbuildVersion)
	}
	return lines
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown CPU"
	}
	return s
}

func cpuModel() string {
	return procField("/proc/cpuinfo", "model name")
}

func memTotal() string {
	kb, err := strconv.ParseFloat(strings.TrimSuffix(procField("/proc/meminfo", "MemTotal"), " kB"), 64)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%.1f GiB", kb/(1<<20))
}

// procField returns the value of the first "name : value" line of a /proc
// file, or "".
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func commandOutput(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
