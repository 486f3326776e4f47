package leasehttp

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// TestErrorTableAgreesEverywhere holds every place that names the error
// codes to errorTable, code for code and status for status: DESIGN.md's
// table, the package doc's, openapi.json (its ErrorCode enum and description, and the code
// of each error answer at each status it is documented with), the
// TypeScript and Python clients' classes (each code's factory, and the
// status each class's comment gives), and testdata/error_answers.json,
// which must read every code at its own status.
func TestErrorTableAgreesEverywhere(t *testing.T) {
	status := map[string]int{}
	var codes []string
	for _, k := range errorTable {
		status[k.code] = k.status
		codes = append(codes, k.code)
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	// sameCodes reports a place whose codes are not the table's, in order
	// where ordered.
	sameCodes := func(where string, got []string, ordered bool) {
		t.Helper()
		if !ordered {
			got = slices.Sorted(slices.Values(got))
			want := slices.Sorted(slices.Values(codes))
			if !slices.Equal(got, want) {
				t.Errorf("%s names codes %q; errors.go's table has %q", where, got, want)
			}
			return
		}
		if !slices.Equal(got, codes) {
			t.Errorf("%s names codes %q; errors.go's table has %q, in that order", where, got, codes)
		}
	}
	// statuses checks each (status, code) pair a text gives.
	statuses := func(where string, pairs [][2]string, wantEvery bool) {
		t.Helper()
		seen := map[string]bool{}
		for _, p := range pairs {
			code, st := p[0], p[1]
			want, ok := status[code]
			if !ok {
				t.Errorf("%s names code %q, which errors.go's table lacks", where, code)
				continue
			}
			seen[code] = true
			if st != strconv.Itoa(want) {
				t.Errorf("%s gives code %q status %s; errors.go's table %d", where, code, st, want)
			}
		}
		for _, c := range codes {
			if wantEvery && !seen[c] {
				t.Errorf("%s gives no status for code %q", where, c)
			}
		}
	}

	// DESIGN.md: the table after "One table (`leasehttp/errors.go`)".
	design := read("../docs/DESIGN.md")
	_, tbl, ok := strings.Cut(design, "One table (`leasehttp/errors.go`)")
	if !ok {
		t.Fatal("DESIGN.md: no error table")
	}
	// The table is the paragraph after the one that names it.
	if parts := strings.SplitN(tbl, "\n\n", 3); len(parts) == 3 {
		tbl = parts[1]
	}
	designCodes, designPairs := codeStatusRows(regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (\\d{3}) \\|"), tbl)
	sameCodes("DESIGN.md's error table", designCodes, true)
	statuses("DESIGN.md's error table", designPairs, true)

	// The package doc's table, in doc.go: "//\tcode  status  error", a long
	// code with its status on the next line.
	pkgDoc := read("doc.go")
	_, pkgTbl, ok := strings.Cut(pkgDoc, "One table (errors.go)")
	if !ok {
		t.Fatal("doc.go: no error table")
	}
	start := strings.Index(pkgTbl, "//\t")
	if start < 0 {
		t.Fatal("doc.go: no rows under \"One table (errors.go)\"")
	}
	pkgTbl, _, _ = strings.Cut(pkgTbl[start:], "\n//\n")
	pkgCodes, pkgPairs := codeStatusRows(regexp.MustCompile("(?m)^//\t([a-z_]+)[ \t]*(?:\n//\t[ \t]*)?(\\d{3})  "), pkgTbl)
	sameCodes("doc.go's error table", pkgCodes, true)
	statuses("doc.go's error table", pkgPairs, true)

	// openapi.json.
	var doc map[string]any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	at := func(v any, path ...string) any {
		for _, p := range path {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		return v
	}
	errorCode := at(doc, "components", "schemas", "ErrorCode")
	var enum []string
	for _, c := range at(errorCode, "enum").([]any) {
		enum = append(enum, c.(string))
	}
	sameCodes("openapi.json's ErrorCode enum", enum, false)
	var descPairs [][2]string
	for _, m := range regexp.MustCompile("`(\\w+)` (\\d{3})").FindAllStringSubmatch(at(errorCode, "description").(string), -1) {
		descPairs = append(descPairs, [2]string{m[1], m[2]})
	}
	statuses("openapi.json's ErrorCode description", descPairs, true)
	// resolve follows a $ref within the document.
	resolve := func(v any) any {
		for {
			ref, ok := at(v, "$ref").(string)
			if !ok {
				return v
			}
			v = at(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...)
		}
	}
	// The status an invalid answer may also have (errors.go's requestError):
	// no route, a wrong method, a watch whose Accept rules out the stream,
	// a body too slow, too large, not JSON.
	invalidToo := []string{"404", "405", "406", "408", "413", "415"}
	documented := map[string]bool{}
	for path, item := range at(doc, "paths").(map[string]any) {
		for method, op := range item.(map[string]any) {
			responses, _ := at(op, "responses").(map[string]any) // nil for the path's parameters
			for st, resp := range responses {
				schema := resolve(at(resolve(resp), "content", "application/json", "schema"))
				parts, _ := at(schema, "allOf").([]any) // nil for an answer that is no error
				for _, part := range parts {
					enum, _ := at(resolve(part), "properties", "error", "properties", "code", "enum").([]any)
					for _, c := range enum {
						code := c.(string)
						documented[code] = true
						if st != strconv.Itoa(status[code]) && (code != "invalid" || !slices.Contains(invalidToo, st)) {
							t.Errorf("openapi.json: %s %s answers %s with code %q; errors.go's table gives it %d", method, path, st, code, status[code])
						}
					}
				}
			}
		}
	}
	for _, c := range codes {
		if !documented[c] && c != "stale_token" { // a fenced service's, never the lease server's
			t.Errorf("openapi.json: no operation answers code %q", c)
		}
	}

	// The TypeScript client: byCode's keys, and "(STATUS `code`" in the
	// classes' comments.
	ts := read("../clients/typescript/src/errors.ts")
	_, byCode, _ := strings.Cut(ts, "const byCode")
	byCode, _, _ = strings.Cut(byCode, "\n};")
	var tsCodes []string
	for _, m := range regexp.MustCompile(`(?m)^  (\w+): \(`).FindAllStringSubmatch(byCode, -1) {
		tsCodes = append(tsCodes, m[1])
	}
	sameCodes("clients/typescript/src/errors.ts byCode", tsCodes, true)
	_, tsPairs := codeStatusRows(regexp.MustCompile("\\((?P<status>\\d{3}) `(?P<code>\\w+)`"), ts)
	statuses("clients/typescript/src/errors.ts's classes", tsPairs, true)

	// The Python client: BY_CODE's keys, and "(STATUS ``code``" in the
	// classes' docstrings.
	py := read("../clients/python/src/leasehq_lease/_errors.py")
	_, byCodePy, _ := strings.Cut(py, "BY_CODE: Final")
	byCodePy, _, _ = strings.Cut(byCodePy, "\n}")
	var pyCodes []string
	for _, m := range regexp.MustCompile(`(?m)^    "(\w+)": `).FindAllStringSubmatch(byCodePy, -1) {
		pyCodes = append(pyCodes, m[1])
	}
	sameCodes("clients/python/src/leasehq_lease/_errors.py BY_CODE", pyCodes, true)
	_, pyPairs := codeStatusRows(regexp.MustCompile("\\((?P<status>\\d{3}) ``(?P<code>\\w+)``"), py)
	statuses("clients/python/src/leasehq_lease/_errors.py's classes", pyPairs, true)

	// testdata/error_answers.json: every code at its own status, read as
	// itself by every client.
	var answers struct {
		Cases []struct {
			Status int    `json:"status"`
			Body   string `json:"body"`
			Want   string `json:"want"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(read("testdata/error_answers.json")), &answers); err != nil {
		t.Fatal(err)
	}
	for _, c := range codes {
		found := false
		for _, a := range answers.Cases {
			var body struct{ Error struct{ Code string } }
			found = found || json.Unmarshal([]byte(a.Body), &body) == nil && body.Error.Code == c && a.Status == status[c] && a.Want == c
		}
		if !found {
			t.Errorf("testdata/error_answers.json has no case of code %q at its status %d", c, status[c])
		}
	}
}

// codeStatusRows reads the rows of a table of error codes in text, each a
// match of re whose submatches are the code and its HTTP status (in that
// order, or named "code" and "status"): the codes in order, and each code
// with its status.
func codeStatusRows(re *regexp.Regexp, text string) (codes []string, pairs [][2]string) {
	code, status := 1, 2
	if i := re.SubexpIndex("code"); i > 0 {
		code, status = i, re.SubexpIndex("status")
	}
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		codes = append(codes, m[code])
		pairs = append(pairs, [2]string{m[code], m[status]})
	}
	return codes, pairs
}
