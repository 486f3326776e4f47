package typescript_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// packedFiles lists the files `npm pack` puts in the package's tarball,
// without building or writing anything.
func packedFiles(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("npm", "pack", "--dry-run", "--json", "--ignore-scripts").Output()
	if err != nil {
		t.Fatalf("npm pack --dry-run: %v", err)
	}
	var packs []struct{ Files []struct{ Path string } }
	if err := json.Unmarshal(out, &packs); err != nil || len(packs) != 1 {
		t.Fatalf("npm pack --dry-run --json: %v: %s", err, out)
	}
	files := map[string]bool{}
	for _, f := range packs[0].Files {
		files[f.Path] = true
	}
	return files
}

// TestPackShipsMapSources: every source a shipped source map points at is
// in the tarball too, so a debugger or a stack trace finds it. tsc writes
// the same maps under dist/ as under the tests' build directory: one
// directory below the package, the sources two levels up from a map.
func TestPackShipsMapSources(t *testing.T) {
	b := build.Get(t)
	maps, err := filepath.Glob(filepath.Join(b.js, "src", "*.js.map"))
	if err != nil || len(maps) == 0 {
		t.Fatalf("no source maps under %s (%v)", b.js, err)
	}
	files := packedFiles(t)
	for _, m := range maps {
		raw, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		var sm struct{ Sources []string }
		if err := json.Unmarshal(raw, &sm); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		shipped := path.Join("dist", "src", filepath.Base(m))
		for _, s := range sm.Sources {
			if p := path.Join(path.Dir(shipped), s); !files[p] {
				t.Errorf("%s points at %s, which the tarball does not hold", shipped, p)
			}
		}
	}
}

// TestPackBuildsOnInstall: `npm install <path to this folder>` links the
// folder as it is, unbuilt unless a prepare script builds it. A copy of
// the package without dist/ is installed into a new project, offline; the
// project must then import it.
func TestPackBuildsOnInstall(t *testing.T) {
	b := build.Get(t)
	pkg := filepath.Join(t.TempDir(), "lease-ts")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(pkg, "src"), os.DirFS("src")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"package.json", "tsconfig.json", "README.md"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, f), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	modules, err := filepath.Abs("node_modules")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(pkg, "node_modules")); err != nil {
		t.Fatal(err)
	}
	project := filepath.Join(t.TempDir(), "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(project, "package.json"), []byte(`{"name":"project","version":"1.0.0","type":"module"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	install := exec.Command("npm", "install", "--offline", "--no-audit", "--no-fund", pkg)
	install.Dir = project
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", pkg, err, out)
	}
	use := exec.Command(b.node, "--input-type=module", "-e", `import { LeaseClient } from "@leasehq/lease"; console.log(typeof LeaseClient);`)
	use.Dir = project
	if out, err := use.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "function" {
		t.Errorf("importing the installed folder: %v\n%s", err, out)
	}
}

// TestReadmeLeftoversIgnored: what the READMEs' steps leave in the
// checkout (the tarball npm pack writes here, the data dir of the restore
// example) is ignored by git, not left untracked.
func TestReadmeLeftoversIgnored(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: asks git")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git not found: install it (Debian: apt-get install git)")
	}
	if out, err := exec.Command("git", "rev-parse", "--is-inside-work-tree").CombinedOutput(); err != nil {
		t.Fatalf("not a git checkout: the test reads the repository's ignore rules (%v: %s)", err, out)
	}
	for _, p := range []string{"leasehq-lease-0.1.0.tgz", "../../lease-data-2/lease.db", "../../lease-data/lease.db"} {
		err := exec.Command("git", "check-ignore", "-q", p).Run()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee) && ee.ExitCode() == 1:
			t.Errorf("%s is not ignored by git: the README's steps leave it untracked", strings.TrimPrefix(p, "../../"))
		default:
			t.Fatalf("git check-ignore %s: %v", p, err)
		}
	}
}
