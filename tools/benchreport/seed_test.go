package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestRunSeed transpiles and times the real seed with the real driver, in
// two rounds as benchreport does.
func TestRunSeed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Node.js and esbuild")
	}
	for _, tool := range []string{"node", "npx"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install Node.js (apt-get install nodejs npm)", tool)
		}
	}
	seedPath := filepath.Join("..", "..", "..", "shared", "seed", "fencing-token.ts")
	if env := os.Getenv("LEASE_SEED_TS"); env != "" {
		seedPath = env
	}
	seedPath, err := filepath.Abs(seedPath)
	if err != nil {
		t.Fatal(err)
	}
	// The seed lives outside the repository, and its row is optional: a
	// checkout without it (a clone elsewhere) has nothing to time.
	if _, err := os.Stat(seedPath); errors.Is(err, fs.ErrNotExist) {
		t.Skipf("no seed at %s (the optional seed row): set LEASE_SEED_TS to its fencing-token.ts", seedPath)
	}
	t.Chdir(filepath.Join("..", "..")) // the driver runs from the module root
	sb, skip := prepareSeed(seedPath)
	if sb == nil {
		t.Fatal(skip)
	}
	defer sb.close()
	var raw []byte
	for range 2 {
		out, err := sb.run("2000x", 3)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, out...)
	}
	out, err := Parse(strings.NewReader(string(raw)), 3)
	if err != nil {
		t.Fatal(err)
	}
	res := Aggregate(out.Samples)
	var got []string
	for _, x := range res {
		got = append(got, x.Group+"/c="+strconv.Itoa(x.Clients)+"/"+x.Impl+" runs="+strconv.Itoa(x.Runs))
		if x.Metrics["ns/op"] <= 0 {
			t.Errorf("%s/c=%d: ns/op %v", x.Group, x.Clients, x.Metrics["ns/op"])
		}
		// On one key, 3 callers interleaved call by call: while one holds
		// it, the other two each find it held once.
		if held, ok := x.Metrics["held/op"]; x.Group == "MemstoreOneKey" && x.Clients == 3 && (!ok || held < 1.99 || held > 2.01) {
			t.Errorf("MemstoreOneKey/c=3 held/op = %v, %v; want 2", held, ok)
		}
	}
	want := "Memstore/c=1/seed-node runs=2 Memstore/c=3/seed-node runs=2 MemstoreOneKey/c=1/seed-node runs=2 MemstoreOneKey/c=3/seed-node runs=2"
	if strings.Join(got, " ") != want {
		t.Errorf("seed results:\n got %s\nwant %s\noutput:\n%s", strings.Join(got, " "), want, raw)
	}
}

func TestPrepareSeedMissingFile(t *testing.T) {
	sb, skip := prepareSeed(filepath.Join(t.TempDir(), "absent.ts"))
	if sb != nil || !strings.Contains(skip, "seed-node rows skipped: cannot read the seed") {
		t.Errorf("prepareSeed on a missing file: %v, skip %q", sb, skip)
	}
}
