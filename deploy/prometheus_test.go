package deploy_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const (
	rulesFile     = "prometheus/lease-alerts.yml"
	rulesTestFile = "prometheus/lease-alerts_test.yml"
	promtoolHint  = "install Debian's prometheus package, which has it (as root: apt-get install prometheus, or scripts/deps.sh)"
)

// rule is one alerting rule of the rules file, as the line reader found it.
type rule struct {
	alert      string
	expr       string
	start, end int // the lines of its expr: [start, end)
}

// readRules reads the alerting rules of a rules file written as ours is:
// "- alert: NAME" items, each with an "expr:" that is one line or a "|"
// block. It is no YAML parser, so it fails on anything else it meets.
func readRules(t *testing.T, text string) []rule {
	t.Helper()
	lines := strings.Split(text, "\n")
	var rules []rule
	indent := func(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "- record:"):
			t.Fatalf("%s:%d: a recording rule: the reader knows only alerts", rulesFile, i+1)
		case strings.HasPrefix(trimmed, "- alert:"):
			rules = append(rules, rule{alert: strings.TrimSpace(strings.TrimPrefix(trimmed, "- alert:"))})
		case strings.HasPrefix(trimmed, "expr:"):
			if len(rules) == 0 || rules[len(rules)-1].expr != "" {
				t.Fatalf("%s:%d: an expr outside an alert, or a second one", rulesFile, i+1)
			}
			r := &rules[len(rules)-1]
			r.start = i
			value := strings.TrimSpace(strings.TrimPrefix(trimmed, "expr:"))
			switch {
			case value == "|":
				var body []string
				for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > indent(line)) {
					i++
					body = append(body, strings.TrimSpace(lines[i]))
				}
				r.expr = strings.TrimSpace(strings.Join(body, "\n"))
			case value == "" || strings.HasPrefix(value, ">") || strings.HasPrefix(value, "|"):
				t.Fatalf("%s:%d: expr %q: the reader knows one-line and \"|\" exprs", rulesFile, i+1, value)
			default:
				r.expr = value
			}
			r.end = i + 1
		}
	}
	for _, r := range rules {
		if r.expr == "" {
			t.Fatalf("%s: alert %s has no expr", rulesFile, r.alert)
		}
	}
	if len(rules) == 0 {
		t.Fatalf("%s: no alerts", rulesFile)
	}
	return rules
}

func loadRules(t *testing.T) (string, []rule) {
	t.Helper()
	text, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(text), readRules(t, string(text))
}

func runPromtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(tool(t, "promtool", promtoolHint), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The rules file is valid: promtool check rules.
func TestAlertRulesCheck(t *testing.T) {
	out, err := runPromtool(t, ".", "check", "rules", rulesFile)
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rulesFile, err, out)
	}
	_, rules := loadRules(t)
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules says\n%s\nwant %q", out, want)
	}
}

// The alerts fire, and stay quiet, as their unit tests say: promtool test
// rules.
func TestAlertRulesUnitTests(t *testing.T) {
	out, err := runPromtool(t, ".", "test", "rules", rulesTestFile)
	if err != nil {
		t.Fatalf("promtool test rules %s: %v\n%s", rulesTestFile, err, out)
	}
}

// Each alert is tested firing: with any one alert made never to fire, the
// unit tests fail.
func TestEveryAlertIsTested(t *testing.T) {
	text, rules := loadRules(t)
	testText, err := os.ReadFile(rulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text, "\n")
	for _, r := range rules {
		t.Run(r.alert, func(t *testing.T) {
			dir := t.TempDir()
			indent := lines[r.start][:len(lines[r.start])-len(strings.TrimLeft(lines[r.start], " "))]
			mutated := append(append(append([]string(nil), lines[:r.start]...), indent+"expr: vector(0) > 1"), lines[r.end:]...)
			for name, body := range map[string]string{
				filepath.Base(rulesFile):     strings.Join(mutated, "\n"),
				filepath.Base(rulesTestFile): string(testText),
			} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out, err := runPromtool(t, dir, "test", "rules", filepath.Base(rulesTestFile))
			if err == nil {
				t.Errorf("with %s never firing, promtool test rules still passes: no test expects it to fire", r.alert)
			} else if !strings.Contains(out, "alertname: "+r.alert) {
				t.Errorf("with %s never firing, promtool test rules failed for another reason:\n%s", r.alert, out)
			}
		})
	}
}
