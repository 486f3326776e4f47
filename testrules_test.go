package lease_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// The test rules hold docs/DESIGN.md's "Tests" paragraph of the Layout
// section against the test files of both modules: how white-box test files
// are named, and that a test sleeps on the real clock only where it says why.

// goFiles returns the Go files of both modules (the repository's root and
// tools/), relative to the root, skipping testdata and node_modules.
func goFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "node_modules", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") {
			out = append(out, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestWhiteBoxTestFilesNamedOneWay checks the naming rule: in a package that
// has black-box tests (package x_test), a test file inside the package
// (package x) is named *_internal_test.go, or export_test.go, which only
// hands internals to the black-box tests and holds no test of its own. A
// package tested only from inside has nothing to tell apart and needs no
// suffix.
func TestWhiteBoxTestFilesNamedOneWay(t *testing.T) {
	type dir struct{ black, white []string }
	dirs := make(map[string]*dir)
	fset := token.NewFileSet()
	parsed := make(map[string]*ast.File)
	for _, p := range goFiles(t) {
		if !strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed[p] = f
		d := dirs[filepath.Dir(p)]
		if d == nil {
			d = new(dir)
			dirs[filepath.Dir(p)] = d
		}
		if strings.HasSuffix(f.Name.Name, "_test") {
			d.black = append(d.black, p)
		} else {
			d.white = append(d.white, p)
		}
	}
	for name, d := range dirs {
		for _, p := range d.white {
			base := filepath.Base(p)
			switch {
			case base == "export_test.go":
				for _, decl := range parsed[p].Decls {
					if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && isTestFunc(fn.Name.Name) {
						t.Errorf("%s: %s is a test in export_test.go, which holds hooks only: move it to a *_internal_test.go file", p, fn.Name.Name)
					}
				}
			case len(d.black) == 0:
				// A package tested only from inside: any name.
			case !strings.HasSuffix(base, "_internal_test.go"):
				t.Errorf("%s: a white-box test file (package %s) in %s, which has black-box tests too: name it *_internal_test.go", p, parsed[p].Name.Name, name)
			}
		}
		for _, p := range d.black {
			if b := filepath.Base(p); strings.HasSuffix(b, "_internal_test.go") || b == "export_test.go" {
				t.Errorf("%s: a black-box test file (package %s) named as a white-box one", p, parsed[p].Name.Name)
			}
		}
	}
}

func isTestFunc(name string) bool {
	for _, prefix := range []string{"Test", "Benchmark", "Fuzz", "Example"} {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

// realTimeNote is how a test says why it sleeps on the real clock.
const realTimeNote = "// real time:"

// bubbleNote marks a sleep in a method of a test double that only tests
// running in a synctest bubble use, called through an interface from the
// code under test (which this check cannot follow): "// in a bubble: who".
const bubbleNote = "// in a bubble:"

// TestSleepsSayWhyRealTime checks that every time.Sleep in a test file or a
// test kit either runs in a testing/synctest bubble, where it advances the
// bubble's fake clock, or carries a "// real time: why" comment on its line
// or the line above: it waits for a real process, engine, kernel or
// wall-clock timeout that no fake clock drives. Everything else waits on a
// condition (package internal/testkit/poll) instead. A sleep is in a bubble
// when it is inside the function given to synctest.Test, or in a function
// of the package that is called only from such places, or marked with a
// "// in a bubble: who" note (a test double's method the code under test
// calls through an interface).
func TestSleepsSayWhyRealTime(t *testing.T) {
	type file struct {
		path    string
		f       *ast.File
		notes   map[int]bool // lines that carry or follow a real-time note
		bubbles map[int]bool // lines that carry or follow a bubble note
	}
	fset := token.NewFileSet()
	pkgs := make(map[string][]*file) // by directory and package name
	for _, p := range goFiles(t) {
		if !strings.HasSuffix(p, "_test.go") && !strings.HasPrefix(p, "internal/testkit/") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		notes, bubbles := make(map[int]bool), make(map[int]bool)
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				for prefix, lines := range map[string]map[int]bool{realTimeNote: notes, bubbleNote: bubbles} {
					if strings.HasPrefix(c.Text, prefix) {
						for line := fset.Position(c.Pos()).Line; line <= fset.Position(cg.End()).Line+1; line++ {
							lines[line] = true
						}
					}
				}
			}
		}
		key := filepath.Dir(p) + " " + f.Name.Name
		pkgs[key] = append(pkgs[key], &file{p, f, notes, bubbles})
	}
	var bubbled, real int
	for _, files := range pkgs {
		// The spans that run in a bubble: the functions given to
		// synctest.Test, then the bodies of the package's functions
		// called only from such spans, until no more are found.
		var spans []ast.Node
		funcs := make(map[string]*ast.FuncDecl)
		for _, f := range files {
			ast.Inspect(f.f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if isCall(n, "synctest", "Test") && len(n.Args) == 2 {
						if lit, ok := n.Args[1].(*ast.FuncLit); ok {
							spans = append(spans, lit)
						}
					}
				case *ast.FuncDecl:
					if n.Recv == nil && n.Body != nil {
						funcs[n.Name.Name] = n
					}
				}
				return true
			})
		}
		inSpan := func(n ast.Node) bool {
			for _, s := range spans {
				if s.Pos() <= n.Pos() && n.End() <= s.End() {
					return true
				}
			}
			return false
		}
		for grown := true; grown; {
			grown = false
			for name, fn := range funcs {
				uses, inside := 0, 0
				for _, f := range files {
					ast.Inspect(f.f, func(n ast.Node) bool {
						if id, ok := n.(*ast.Ident); ok && id.Name == name && id != fn.Name {
							uses++
							if inSpan(id) {
								inside++
							}
						}
						return true
					})
				}
				if uses > 0 && uses == inside {
					spans = append(spans, fn.Body)
					delete(funcs, name)
					grown = true
				}
			}
		}
		for _, f := range files {
			ast.Inspect(f.f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || !isCall(call, "time", "Sleep") {
					return true
				}
				pos := fset.Position(call.Pos())
				if inSpan(call) || f.bubbles[pos.Line] {
					bubbled++
					return true
				}
				if !f.notes[pos.Line] {
					t.Errorf("%s:%d: time.Sleep outside a synctest bubble without a %q comment: wait on a condition (internal/testkit/poll), or say why real time is needed", f.path, pos.Line, realTimeNote)
					return true
				}
				real++
				return true
			})
		}
	}
	t.Logf("time.Sleep in tests and test kits: %d on the real clock, each with a reason; %d in synctest bubbles", real, bubbled)
}

// isCall reports whether call calls pkg.name.
func isCall(call *ast.CallExpr, pkg, name string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}
