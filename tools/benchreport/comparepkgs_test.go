package main

import (
	"slices"
	"strings"
	"testing"
)

// TestComparePackagesOfBothModules: the default -pkg patterns, from the
// repository's root, find the Compare benchmarks of both modules and
// nothing outside them. "./..." once reached go list as "...", every
// package known, and make bench stopped at go.mod's first missing one.
func TestComparePackagesOfBothModules(t *testing.T) {
	if testing.Short() {
		t.Skip("lists both modules' packages with go list")
	}
	t.Chdir("../..")
	pkgs, err := comparePackages([]string{"./...", "./tools/..."})
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, p := range pkgs {
		paths = append(paths, p.path)
	}
	for _, want := range []string{"github.com/leasehq/lease/memstore", "github.com/leasehq/lease/tools/linebench", "github.com/leasehq/lease/tools/scalebench"} {
		if !slices.Contains(paths, want) {
			t.Errorf("%s not found in %v", want, paths)
		}
	}
	for _, p := range paths {
		if !strings.HasPrefix(p, "github.com/leasehq/lease/") {
			t.Errorf("%s is not a package of the repository", p)
		}
	}
}
