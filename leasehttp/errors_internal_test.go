package leasehttp

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// TestErrorAnswersAsEveryClientReadsThem reads the cases of
// testdata/error_answers.json, which the TypeScript and Python clients' tests
// read too, so that the three clients make one class of each error answer:
// its code's, else (no API error body, or a code they do not know) its
// status's.
func TestErrorAnswersAsEveryClientReadsThem(t *testing.T) {
	raw, err := os.ReadFile("testdata/error_answers.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
			Want   string `json:"want"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range doc.Cases {
		err := answerError("get", "k", &response{status: c.Status, body: []byte(c.Body)})
		var got []string
		for _, k := range errorTable {
			if errors.Is(err, k.err) {
				got = append(got, k.code)
			}
		}
		want := []string{c.Want}
		if c.Want == "unexpected" {
			want = nil
		} else if _, ok := kindByCode(c.Want); !ok {
			t.Fatalf("case %d %s: want %q is not a code of the table", c.Status, c.Body, c.Want)
		}
		if len(got) != len(want) || (len(want) == 1 && got[0] != want[0]) {
			t.Errorf("HTTP %d %s: %v matches %v, want %v", c.Status, c.Body, err, got, want)
		}
	}
}
