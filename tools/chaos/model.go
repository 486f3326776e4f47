package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// registerState is the fenced register's state: the value of the newest
// accepted write and the highest accepted token.
type registerState struct {
	value string
	token lease.Token
}

// RegisterModel is the sequential specification of a register behind a
// guard admitting tokens by mode: a write is accepted if and only if mode
// admits its token over the highest accepted so far, and an accepted write
// sets value and token; a rejected one changes nothing; a read returns the
// state. Histories are partitioned by key.
func RegisterModel(mode fence.Mode) porcupine.Model {
	return porcupine.Model{
		Partition: partitionBy(func(in any) string { return in.(RegisterInput).Key }),
		Init:      func() any { return registerState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(registerState), input.(RegisterInput), output.(RegisterOutput)
			switch in.Kind {
			case OpWrite:
				if out.Accepted != mode.Admits(in.Token, s.token) {
					return false, s
				}
				if out.Accepted {
					return true, registerState{value: in.Value, token: in.Token}
				}
				return true, s
			case OpRead:
				return out.Value == s.value && out.Token == s.token, s
			}
			return false, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(RegisterInput), output.(RegisterOutput)
			if in.Kind == OpWrite {
				verdict := "rejected"
				if out.Accepted {
					verdict = "accepted"
				}
				return fmt.Sprintf("write(%s, t%d, %s) → %s", in.Key, in.Token, in.Value, verdict)
			}
			return fmt.Sprintf("read(%s) → %q t%d", in.Key, out.Value, out.Token)
		},
		DescribeState: func(state any) string {
			s := state.(registerState)
			return fmt.Sprintf("value=%q highest=t%d", s.value, s.token)
		},
	}
}

// GrantModel is the sequential specification of a key's token counter as
// clients see it: every successful Acquire returns a token strictly greater
// than every token returned before (I1). Tokens of acquisitions whose outcome
// was never seen leave gaps, which the model allows.
func GrantModel() porcupine.Model {
	return porcupine.Model{
		Partition: partitionBy(func(in any) string { return in.(GrantInput).Key }),
		Init:      func() any { return lease.Token(0) },
		Step: func(state, _, output any) (bool, any) {
			highest, tok := state.(lease.Token), output.(GrantOutput).Token
			if tok <= highest {
				return false, highest
			}
			return true, tok
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("acquire(%s) → t%d", input.(GrantInput).Key, output.(GrantOutput).Token)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("highest granted t%d", state.(lease.Token)) },
	}
}

func partitionBy(key func(input any) string) func([]porcupine.Operation) [][]porcupine.Operation {
	return func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := key(op.Input)
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	}
}

// Verdict is the outcome of checking one history.
type Verdict struct {
	Result porcupine.CheckResult
	// Visualization is the path of porcupine's HTML visualisation of the
	// history, written when the result is not Ok (or always, if asked).
	Visualization string
	Ops           int
	Elapsed       time.Duration
}

// Check checks history against model within timeout. If the history is not
// linearizable (or the check timed out), or if always is set, it writes
// porcupine's visualisation, with events as annotations, to a file named
// name+".html" in dir (made by mkdir when first needed) and returns its path.
func Check(model porcupine.Model, history []porcupine.Operation, events []Event, timeout time.Duration,
	name string, always bool, mkdir func() (string, error)) (Verdict, error) {
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	v := Verdict{Result: res, Ops: len(history), Elapsed: time.Since(start)}
	if res == porcupine.Ok && !always {
		return v, nil
	}
	dir, err := mkdir()
	if err != nil {
		return v, fmt.Errorf("chaos: directory for the visualisation: %w", err)
	}
	info.AddAnnotations(annotations(events))
	v.Visualization = filepath.Join(dir, name+".html")
	if err := porcupine.VisualizePath(model, info, v.Visualization); err != nil {
		return v, fmt.Errorf("chaos: writing the visualisation: %w", err)
	}
	return v, nil
}

func annotations(events []Event) []porcupine.Annotation {
	out := make([]porcupine.Annotation, 0, len(events))
	for _, e := range events {
		a := porcupine.Annotation{Start: e.Start, End: e.End, Description: e.Tag, Details: e.Text}
		if e.Worker >= 0 {
			a.ClientId = e.Worker
			a.BackgroundColor = "#fde68a"
		} else {
			a.Tag = "faults"
			a.BackgroundColor = "#fecaca"
		}
		out = append(out, a)
	}
	return out
}

// ArtifactDir returns a function making the directory visualisations go to:
// $LEASE_CHAOS_ARTIFACTS/<test> if that variable is set, else a fresh
// directory under the system's temporary directory that outlives the test,
// so that a failure's visualisation can be opened afterwards.
func ArtifactDir(testName string) func() (string, error) {
	safe := strings.NewReplacer("/", "_", " ", "_").Replace(testName)
	return func() (string, error) {
		if root := os.Getenv(EnvArtifacts); root != "" {
			dir := filepath.Join(root, safe)
			return dir, os.MkdirAll(dir, 0o755)
		}
		return os.MkdirTemp("", "lease-chaos-"+safe+"-")
	}
}

// EnvArtifacts names the environment variable of the directory that
// visualisations are written under.
const EnvArtifacts = "LEASE_CHAOS_ARTIFACTS"
