package demo_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehq/lease/internal/cli"
	"github.com/leasehq/lease/internal/demo"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// The demo's output, through the real command line, is the golden file's.
func TestDemoGolden(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   []string
	}{
		{"demo.golden", []string{"demo"}},
		{"demo-unfenced.golden", []string{"demo", "--unfenced"}},
		{"demo-strict.golden", []string{"demo", "--strict"}},
		{"demo.svg", []string{"demo", "--svg", "-"}},
		{"demo-unfenced.svg", []string{"demo", "--unfenced", "--svg", "-"}},
		{"demo-strict.svg", []string{"demo", "--strict", "--svg", "-"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := cli.Main(tc.args, nil, &stdout, &stderr); code != 0 {
				t.Fatalf("lease %v: exit %d, stderr %q", tc.args, code, stderr.String())
			}
			path := filepath.Join("testdata", tc.golden)
			if *update {
				if err := os.WriteFile(path, stdout.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/demo -update to create it)", err)
			}
			if !bytes.Equal(stdout.Bytes(), want) {
				t.Errorf("lease %v output differs from %s:\n--- got\n%s\n--- want\n%s", tc.args, path, stdout.Bytes(), want)
			}
		})
	}
}

// The final states are the seed's, and the unfenced run shows the bug.
func TestDemoFinalState(t *testing.T) {
	var out bytes.Buffer
	fenced, err := demo.Run(&out, demo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if fenced != (demo.State{Value: "written-by-b", LastToken: 2}) {
		t.Errorf("fenced final state = %+v, want written-by-b / 2", fenced)
	}
	unfenced, err := demo.Run(&out, demo.Options{Unfenced: true})
	if err != nil {
		t.Fatal(err)
	}
	if unfenced != (demo.State{Value: "late-write-by-a", LastToken: 1}) {
		t.Errorf("unfenced final state = %+v, want the late write to win", unfenced)
	}
}

func TestDemoRejectsArguments(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := cli.Main([]string{"demo", "extra"}, nil, &stdout, &stderr); code == 0 {
		t.Fatal("lease demo extra: exit 0")
	}
	// One error line, then the command's usage line (a wrong argument count).
	errLine, usage, ok := strings.Cut(stderr.String(), "\n")
	if !ok || !strings.HasPrefix(errLine, "lease: ") || usage != "usage: lease demo [flags]\n" {
		t.Errorf("error output %q, want one error line and lease demo's usage line", stderr.String())
	}
}
