package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/leasehq/lease/internal/memtest"
	"github.com/spf13/cobra"
)

// flagLineRE matches a flag in a help text's Flags section: its name, its
// placeholder if it takes a value (pflag's, from the first `quoted` word of
// the usage, else the type), and its help.
var flagLineRE = regexp.MustCompile(`^\s+(?:-\w, )?--([a-z0-9-]+)(?: (\S.*?))?\s{2,}(.*)$`)

// placeholderRE is what a value placeholder should look like: one upper-case
// word (FILE, URL, HOST:PORT), or pflag's "duration", which says it well.
var placeholderRE = regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*(?::[A-Z][A-Z0-9_]*)?|duration)$`)

// TestHelpFlagsSayWhatTheyTake renders every command's --help and checks
// each flag line: a value flag names its value with a placeholder (not
// pflag's "string" or "uint", and not a phrase such as "TOKEN PREFIX…"
// lifted from the help text); --timeout speaks of --wait only where there
// is one; serve's --data-dir says what its relative default is relative to.
func TestHelpFlagsSayWhatTheyTake(t *testing.T) {
	var paths [][]string
	var walk func(c *cobra.Command, path []string)
	walk = func(c *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk(newRoot(&app{}), nil)
	if len(paths) < 9 {
		t.Fatalf("found only the commands %v", paths)
	}
	for _, path := range paths {
		name := strings.Join(append([]string{"lease"}, path...), " ")
		r := cli(t, memtest.New(t), nil, nil, append(append([]string(nil), path...), "--help")...)
		if r.code != ExitOK {
			t.Fatalf("%s --help: exit %d, stderr %q", name, r.code, r.stderr)
		}
		flags := map[string]string{} // name → the rest of its line
		inFlags := false
		for _, line := range strings.Split(r.stdout, "\n") {
			switch {
			case strings.HasSuffix(line, "Flags:"):
				inFlags = true
				continue
			case line == "":
				inFlags = false
			}
			if !inFlags {
				continue
			}
			m := flagLineRE.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s --help: cannot read the flag line %q", name, line)
				continue
			}
			flags[m[1]] = line
			if m[2] != "" && !placeholderRE.MatchString(m[2]) {
				t.Errorf("%s --help: --%s takes %q; want a placeholder such as FILE (a `FILE` in its usage): %q", name, m[1], m[2], line)
			}
		}
		if line, ok := flags["timeout"]; ok && strings.Contains(line, "--wait") {
			if _, ok := flags["wait"]; !ok {
				t.Errorf("%s --help: --timeout speaks of --wait, which %s does not have: %q", name, name, line)
			}
		}
		if len(path) == 1 && path[0] == "serve" && !strings.Contains(flags["data-dir"], "working directory") {
			t.Errorf("lease serve --help: --data-dir does not say its default is relative to the working directory: %q", flags["data-dir"])
		}
	}
}
