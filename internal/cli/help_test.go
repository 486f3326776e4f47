package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasehq/lease/internal/testkit/memtest"
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

// TestCommandsListedEverywhere: the README's layout table and the root
// command's help name every command of the cobra tree, so that a command
// added later cannot be left out of them.
func TestCommandsListedEverywhere(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var row string
	for line := range strings.SplitSeq(string(readme), "\n") {
		if strings.HasPrefix(line, "| `cmd/lease` |") {
			row = line
		}
	}
	if row == "" {
		t.Fatal("README.md has no layout row for cmd/lease")
	}
	help := cli(t, memtest.New(t), nil, nil, "--help").stdout
	root := newRoot(&app{})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	n := 0
	for _, c := range root.Commands() {
		if c.Name() == "help" || c.Name() == "completion" {
			continue // cobra's own
		}
		n++
		if !strings.Contains(row, "`"+c.Name()+"`") {
			t.Errorf("README.md's layout row for cmd/lease does not name %q: %s", c.Name(), row)
		}
		if !regexp.MustCompile(`(?m)^\s+` + c.Name() + `\s`).MatchString(help) {
			t.Errorf("lease --help does not list %q", c.Name())
		}
	}
	if n < 14 {
		t.Fatalf("found only %d commands", n)
	}
}

// TestServeHelpListsBackendsTogether: lease serve --help lists the
// --backend URL forms in one block, one line each.
func TestServeHelpListsBackendsTogether(t *testing.T) {
	help := cli(t, memtest.New(t), nil, nil, "serve", "--help").stdout
	if !regexp.MustCompile(`\n  postgres://[^\n]*\n  redis://[^\n]*\n  etcd://[^\n]*\n`).MatchString(help) {
		t.Errorf("lease serve --help does not list the postgres://, redis:// and etcd:// lines together:\n%s", help)
	}
}

// TestWatchHelpSaysServedBackendsWatch: lease watch --help does not say
// that a backend lease serve runs cannot watch: they all can.
func TestWatchHelpSaysServedBackendsWatch(t *testing.T) {
	help := cli(t, memtest.New(t), nil, nil, "watch", "--help").stdout
	for _, b := range []string{"PostgreSQL", "Redis", "etcd"} {
		if !strings.Contains(help, b) {
			t.Errorf("lease watch --help does not name %s among the backends that watch:\n%s", b, help)
		}
	}
	if strings.Contains(help, "cannot watch (PostgreSQL") {
		t.Errorf("lease watch --help still says PostgreSQL, Redis and etcd cannot watch:\n%s", help)
	}
}

// TestWrongArgumentCountPrintsUsage: a wrong number of arguments is a
// usage error (exit 2) that prints the command's usage line after the
// error line.
func TestWrongArgumentCountPrintsUsage(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage string
	}{
		{[]string{"get"}, "usage: lease get KEY"},
		{[]string{"release", "a", "b"}, "usage: lease release KEY"},
		{[]string{"list", "x"}, "usage: lease list"},
		{[]string{"watch", "a", "b"}, "usage: lease watch [PREFIX]"},
		{[]string{"serve", "x"}, "usage: lease serve"},
		{[]string{"demo", "x"}, "usage: lease demo"},
		{[]string{"run", "k"}, "usage: lease run KEY"},
	} {
		r := cli(t, memtest.New(t), nil, nil, tc.args...)
		lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
		if r.code != ExitUsage || len(lines) != 2 || !strings.HasPrefix(lines[0], "lease: ") || !strings.HasPrefix(lines[1], tc.usage) {
			t.Errorf("lease %s: exit %d, stderr %q; want exit %d, the error, then a line starting %q",
				strings.Join(tc.args, " "), r.code, r.stderr, ExitUsage, tc.usage)
		}
	}
}

// TestServeFlagsTableIsTheCommands: SERVE.md's table of lease serve's flags
// names every flag the command has and no other, each with the default the
// command really has (durations compared as durations: the table's 2m is
// pflag's 2m0s).
func TestServeFlagsTableIsTheCommands(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "SERVE.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(doc), "### Flags of `lease serve`\n")
	if !ok {
		t.Fatal("SERVE.md has no section \"Flags of `lease serve`\"")
	}
	table, _, _ = strings.Cut(strings.TrimLeft(table, "\n"), "\n\n") // to the first blank line
	rowRE := regexp.MustCompile("(?m)^\\| (`--[a-z-]+`(?:, `--[a-z-]+`)*) \\| ([^|]*) \\|")
	namesRE := regexp.MustCompile("`--([a-z-]+)`")
	var serve *cobra.Command
	for _, c := range newRoot(&app{}).Commands() {
		if c.Name() == "serve" {
			serve = c
		}
	}
	documented := map[string]bool{}
	rows := rowRE.FindAllStringSubmatch(table, -1)
	for _, row := range rows {
		want := strings.Trim(strings.TrimSpace(row[2]), "`")
		for _, m := range namesRE.FindAllStringSubmatch(row[1], -1) {
			name := m[1]
			documented[name] = true
			f := serve.Flags().Lookup(name)
			if f == nil {
				t.Errorf("SERVE.md documents lease serve --%s, which it does not have", name)
				continue
			}
			got := f.DefValue
			if got == "[]" { // an empty list's
				got = ""
			}
			switch {
			case want == "–":
				want = ""
			case f.Value.Type() == "duration":
				d, err := time.ParseDuration(want)
				if err != nil {
					t.Errorf("SERVE.md: --%s's default %q is not a duration", name, want)
					continue
				}
				want = d.String()
			}
			if got != want {
				t.Errorf("SERVE.md says lease serve --%s defaults to %q; it is %q", name, want, got)
			}
		}
	}
	if len(rows) < 20 {
		t.Fatalf("read only %d rows of SERVE.md's table of flags", len(rows))
	}
	help := cli(t, memtest.New(t), nil, nil, "serve", "--help").stdout
	_, flags, _ := strings.Cut(help, "\nFlags:\n")
	for _, line := range strings.Split(flags, "\n") {
		if m := flagLineRE.FindStringSubmatch(line); m != nil && m[1] != "help" && !documented[m[1]] {
			t.Errorf("lease serve --%s is missing from SERVE.md's table of flags", m[1])
		}
	}
}
