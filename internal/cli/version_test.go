package cli

import (
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/leasehq/lease/internal/testkit/memtest"
)

func TestVersionText(t *testing.T) {
	for _, tc := range []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"}},
			true, "lease v1.4.0 go1.26.8"},
		{"checkout with changes", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main: debug.Module{Version: "v0.0.0-20260101120000-62453decb334+dirty"},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: "62453decb334eccc7c2dac1b2373c037c00dc70d"},
				{Key: "vcs.modified", Value: "true"},
			}},
			true, "lease v0.0.0-20260101120000-62453decb334+dirty revision 62453decb334eccc7c2dac1b2373c037c00dc70d (modified) go1.26.8"},
		{"devel, clean tree", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}},
			true, "lease (devel) revision abc go1.26.8"},
		{"no main version", &debug.BuildInfo{GoVersion: "go1.26.8"}, true, "lease (devel) go1.26.8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := versionText(tc.info, tc.ok); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if got := versionText(nil, false); !strings.HasPrefix(got, "lease (no build information) go") {
		t.Errorf("without build information: %q", got)
	}
}

// TestVersionCommandAndFlag: `lease version` and `lease --version` print
// the same line, built from this binary's build information.
func TestVersionCommandAndFlag(t *testing.T) {
	b := memtest.New(t)
	cmd := cli(t, b, nil, nil, "version")
	flag := cli(t, b, nil, nil, "--version")
	if cmd.code != ExitOK || flag.code != ExitOK || cmd.stderr != "" || flag.stderr != "" {
		t.Fatalf("version: exit %d stderr %q; --version: exit %d stderr %q", cmd.code, cmd.stderr, flag.code, flag.stderr)
	}
	want := versionText(debug.ReadBuildInfo()) + "\n"
	if cmd.stdout != want || flag.stdout != want {
		t.Errorf("version printed %q, --version %q; want %q", cmd.stdout, flag.stdout, want)
	}
}

// TestBinaryVersion: the built binary's version line names the module
// version, revision and Go version that `go version -m` reads from it.
func TestBinaryVersion(t *testing.T) {
	bin := leaseBinary(t)
	r := runBinary(t, nil, "version")
	if r.code != ExitOK || strings.Count(r.stdout, "\n") != 1 {
		t.Fatalf("lease version: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if f := runBinary(t, nil, "--version"); f.stdout != r.stdout {
		t.Errorf("lease --version printed %q, lease version %q", f.stdout, r.stdout)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("no go command to read the build information with (install Go):", err)
	}
	out, err := exec.Command(goBin, "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	// "BIN: go1.x", then tab-separated lines: "mod PATH VERSION", "build vcs.revision=REV".
	lines := strings.Split(string(out), "\n")
	want := []string{"lease ", " " + strings.TrimSpace(lines[0][strings.LastIndex(lines[0], ":")+1:])}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "mod":
			want = append(want, " "+f[2])
		case len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "vcs.revision="):
			want = append(want, " revision "+strings.TrimPrefix(f[1], "vcs.revision="))
		}
	}
	if len(want) < 3 {
		t.Fatalf("go version -m printed no main module:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout, w) {
			t.Errorf("lease version printed %q, which lacks %q (go version -m says:\n%s)", r.stdout, w, out)
		}
	}
}
