// Package examples holds the test that keeps the module's examples
// copyable. The programs under examples/ and the Example functions beside
// the public packages show what a user of the module can write; a user
// cannot import the module's internal packages, so neither may they.
package examples

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/leasehq/lease"

// internalImport reports whether an import path names one of the module's
// internal packages.
func internalImport(p string) bool {
	return p == module+"/internal" || strings.HasPrefix(p, module+"/internal/")
}

// TestExamplesImportNothingInternal reads every Go file of examples/ and
// every Example function of the module's public packages (the module root
// is the parent directory) and fails on each use of an internal package.
func TestExamplesImportNothingInternal(t *testing.T) {
	const root = ".."
	fset := token.NewFileSet()
	var programs, examples int
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		if d.IsDir() {
			name := d.Name()
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" || rel == "internal") {
				return filepath.SkipDir // not Go, or not public
			}
			return nil
		}
		program := strings.HasPrefix(rel, "examples/")
		if !strings.HasSuffix(rel, ".go") || (!program && !strings.HasSuffix(rel, "_test.go")) {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		internal := map[string]string{} // name in the file → import path
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil || !internalImport(ip) {
				continue
			}
			if program {
				t.Errorf("%s imports %s: an example must build outside the module", rel, ip)
			}
			name := path.Base(ip)
			if imp.Name != nil {
				name = imp.Name.Name
			}
			internal[name] = ip
		}
		if program {
			programs++
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			examples++
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && internal[x.Name] != "" {
						t.Errorf("%s: %s uses %s.%s from %s: a reader cannot copy it", fset.Position(sel.Pos()), fn.Name.Name, x.Name, sel.Sel.Name, internal[x.Name])
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A walk from the wrong directory would find nothing and pass.
	if programs == 0 || examples == 0 {
		t.Fatalf("found %d example program files and %d Example functions; want some of each", programs, examples)
	}
}
