package lease_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The layout tests hold docs/DESIGN.md's Layout section against the code:
// its three tables (code that ships, test kits, tools) list every package of
// both modules and nothing else, and what it claims of them is so.

const modulePath = "github.com/leasehq/lease"

// rooms are the Layout section's tables, by their headings' first words.
var rooms = []string{"Code that ships", "Test kits", "Tools"}

// testOnlyModules are the dependencies DESIGN.md says only tests and tools
// use: no package that ships may pull one in.
var testOnlyModules = []string{
	"go.uber.org/goleak",
	"github.com/getkin/kin-openapi",
	"github.com/chromedp/",
	"go.etcd.io/etcd/server/",
	"github.com/go-sql-driver/mysql",
	"modernc.org/sqlite",
	"github.com/anishathalye/porcupine",
	"github.com/Shopify/toxiproxy",
	"github.com/go-redsync/redsync",
	"github.com/bsm/redislock",
}

// toolsOnlyModules are what DESIGN.md says only tools/go.mod requires.
var toolsOnlyModules = []string{
	"github.com/anishathalye/porcupine",
	"github.com/Shopify/toxiproxy",
	"github.com/go-redsync/redsync",
	"github.com/bsm/redislock",
}

// designRooms reads the Layout section's tables: for each room, the
// directories (relative to the repository's root) its rows name.
func designRooms(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join("docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := regexp.MustCompile("`([^`]+)`")
	out := make(map[string][]string)
	room, inLayout := "", false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			inLayout, room = line == "## Layout", ""
		case inLayout && strings.HasPrefix(line, "### "):
			room = ""
			for _, r := range rooms {
				if strings.HasPrefix(line, "### "+r) {
					room = r
				}
			}
			if room == "" {
				t.Errorf("DESIGN.md: Layout heading %q is none of the rooms %q", line, rooms)
			}
		case inLayout && room != "" && strings.HasPrefix(line, "| `"):
			first := strings.Split(line, "|")[1]
			for _, m := range names.FindAllStringSubmatch(first, -1) {
				dir := m[1]
				if dir == "lease" && strings.Contains(first, "(root)") {
					dir = "."
				}
				out[room] = append(out[room], dir)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rooms {
		if len(out[r]) == 0 {
			t.Fatalf("DESIGN.md: no table of %q under ## Layout", r)
		}
	}
	return out
}

// goPackage is what `go list` says of one package.
type goPackage struct {
	Dir, ImportPath string
	Imports, Deps   []string
	Standard        bool
}

// goList lists patterns in the module at dir (relative to the root).
func goList(t *testing.T, dir string, patterns ...string) []goPackage {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go list: %v: the layout tests need the go command in PATH", err)
	}
	cmd := exec.Command(goBin, append([]string{"list", "-json=Dir,ImportPath,Imports,Deps,Standard"}, patterns...)...)
	cmd.Dir = dir
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s (in %s): %v", strings.Join(patterns, " "), dir, err)
	}
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// repoDirs lists both modules' packages by directory relative to the root.
func repoDirs(t *testing.T) map[string]goPackage {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	dirs := make(map[string]goPackage)
	for _, mod := range []string{".", "tools"} {
		for _, p := range goList(t, mod, "./...") {
			rel, err := filepath.Rel(root, p.Dir)
			if err != nil {
				t.Fatal(err)
			}
			dirs[filepath.ToSlash(rel)] = p
		}
	}
	return dirs
}

func TestLayoutListsEveryPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over both modules (skipped under -short)")
	}
	design := designRooms(t)
	code := repoDirs(t)
	listed := make(map[string]string)
	for room, dirs := range design {
		for _, d := range dirs {
			if other, ok := listed[d]; ok {
				t.Errorf("DESIGN.md lists %s under both %q and %q", d, other, room)
			}
			listed[d] = room
			if _, ok := code[d]; !ok {
				t.Errorf("DESIGN.md lists %s (%s), which is no package of either module", d, room)
			}
			if inTools := strings.HasPrefix(d, "tools/"); inTools != (room == "Tools") {
				t.Errorf("DESIGN.md lists %s under %q, but it is in the module of %s", d, room,
					map[bool]string{true: "tools/", false: "the library"}[inTools])
			}
		}
	}
	for d := range code {
		if _, ok := listed[d]; !ok {
			t.Errorf("package %s is in no table of DESIGN.md's Layout section: add its row to the room it belongs to", d)
		}
	}
}

func TestShippedCodeImportsNoTestKitToolOrTestDependency(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over both modules (skipped under -short)")
	}
	design := designRooms(t)
	code := repoDirs(t)
	var kits []string
	for _, d := range design["Test kits"] {
		kits = append(kits, path.Join(modulePath, d))
	}
	for _, d := range design["Code that ships"] {
		p, ok := code[d]
		if !ok {
			continue // TestLayoutListsEveryPackage reports it
		}
		for _, dep := range p.Deps {
			switch {
			case slices.Contains(kits, dep) || strings.HasPrefix(dep, modulePath+"/internal/testkit/"):
				t.Errorf("%s ships but links the test kit %s", d, dep)
			case strings.HasPrefix(dep, modulePath+"/tools/"):
				t.Errorf("%s ships but links the tool %s", d, dep)
			}
			for _, m := range testOnlyModules {
				if strings.HasPrefix(dep, m) {
					t.Errorf("%s ships but links %s, which DESIGN.md says only tests use", d, dep)
				}
			}
		}
	}
}

func TestRootImportsWhatDesignSays(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list (skipped under -short)")
	}
	allowed := []string{modulePath + "/internal/wait", modulePath + "/internal/dueheap"}
	pkgs := goList(t, ".", append([]string{"."}, allowed...)...)
	std := make(map[string]bool)
	for _, p := range goList(t, ".", "std") {
		std[p.ImportPath] = true
	}
	for _, p := range pkgs {
		for _, imp := range p.Imports {
			if std[imp] {
				continue
			}
			if p.ImportPath == modulePath && slices.Contains(allowed, imp) {
				continue
			}
			t.Errorf("%s imports %s: DESIGN.md says the root imports only the standard library, %s, and those only the standard library",
				p.ImportPath, imp, strings.Join(allowed, " and "))
		}
	}
}

func TestLibraryModuleRequiresNoToolsOnlyDependency(t *testing.T) {
	gomod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range toolsOnlyModules {
		if strings.Contains(string(gomod), m) {
			t.Errorf("go.mod requires %s, which DESIGN.md says only tools/go.mod needs", m)
		}
	}
	tools, err := os.ReadFile(filepath.Join("tools", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(tools), "replace "+modulePath+" => ../") {
		t.Errorf("tools/go.mod does not use this checkout (replace %s => ../)", modulePath)
	}
}

// TestLayoutNamesEveryCommand: the Layout row of internal/cli names the
// commands of its cobra tree (each command's Use), every one and no other.
func TestLayoutNamesEveryCommand(t *testing.T) {
	design, err := os.ReadFile(filepath.Join("docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `internal/cli` \\|[^\\n]*?\\(([^)]*)\\)").FindSubmatch(design)
	if row == nil {
		t.Fatal("DESIGN.md: no row of internal/cli with its commands in parentheses")
	}
	var listed []string
	for _, m := range regexp.MustCompile("`([a-z-]+)`").FindAllSubmatch(row[1], -1) {
		listed = append(listed, string(m[1]))
	}
	var commands []string
	for _, name := range codeMatches(t, filepath.Join("internal", "cli"), regexp.MustCompile(`Use:\s+"([a-z][a-z-]*)`)) {
		if name != "lease" { // the root command
			commands = append(commands, name)
		}
	}
	slices.Sort(listed)
	slices.Sort(commands)
	if len(commands) == 0 || !slices.Equal(listed, commands) {
		t.Errorf("DESIGN.md's Layout row of internal/cli names the commands %q; its cobra tree has %q", listed, commands)
	}
}

// abilities are the optional interfaces DESIGN.md's Layout section names
// a backend by: "Optional abilities (WaitAcquirer, Notifier, Watcher,
// BatchRenewer)".
var abilities = []string{"WaitAcquirer", "Notifier", "Watcher", "BatchRenewer"}

// TestLayoutNamesEveryAbility: each backend's row under "Code that ships"
// names exactly the optional abilities its package asserts it has, by the
// `var _ lease.Ability = (*T)(nil)` checks of its code.
func TestLayoutNamesEveryAbility(t *testing.T) {
	design, err := os.ReadFile(filepath.Join("docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, ships, ok := strings.Cut(string(design), "\n### Code that ships")
	ships, _, _ = strings.Cut(ships, "\n### ")
	if !ok {
		t.Fatal("DESIGN.md: no Code that ships table")
	}
	asserted := regexp.MustCompile(`_\s+lease\.(\w+)\s*=\s*\(\*\w+\)\(nil\)`)
	named := regexp.MustCompile("`(\\w+)`")
	for _, dir := range []string{"memstore", "boltstore", "pgstore", "redisstore", "etcdstore", "leasehttp"} {
		var row string
		for _, line := range strings.Split(ships, "\n") {
			if strings.HasPrefix(line, "| `"+dir+"` |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("DESIGN.md: no row of %s under Code that ships", dir)
			continue
		}
		var says []string
		for _, m := range named.FindAllStringSubmatch(row, -1) {
			if slices.Contains(abilities, m[1]) && !slices.Contains(says, m[1]) {
				says = append(says, m[1])
			}
		}
		var has []string
		for _, a := range codeMatches(t, dir, asserted) {
			if slices.Contains(abilities, a) && !slices.Contains(has, a) {
				has = append(has, a)
			}
		}
		slices.Sort(says)
		slices.Sort(has)
		if !slices.Equal(says, has) {
			t.Errorf("DESIGN.md's Layout row of %s names the abilities %q; its code asserts %q", dir, says, has)
		}
	}
}

// codeMatches returns re's first submatch at each of its matches in the Go
// files of dir that are not tests.
func codeMatches(t *testing.T, dir string, re *regexp.Regexp) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			out = append(out, string(m[1]))
		}
	}
	return out
}
