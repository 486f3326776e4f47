package leasehttp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"testing/iotest"
)

// decodeObject reads request bodies with the wire codec's scanner. These
// tests hold it to a reference built from encoding/json's tokenizer, slow
// but plainly right: both must accept the same bodies, with the same
// values. (wire_internal_test.go holds the answers' readers to
// json.Unmarshal.)

// wholeNumber is a JSON number with no sign, fraction or exponent.
var wholeNumber = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// referenceDecode decodes body as an object with a string member "s" and
// whole-number members "n" and "m", each optional, refusing what
// decodeObject must refuse.
func referenceDecode(body []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if tok != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	out := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name := tok.(string)
		if name != "s" && name != "n" && name != "m" {
			return nil, errors.New("unknown member")
		}
		if _, dup := out[name]; dup {
			return nil, errors.New("repeated member")
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if name == "s" {
			var v string
			if raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
				return nil, errors.New("not a string")
			}
			out[name] = v
			continue
		}
		if !wholeNumber.Match(raw) {
			return nil, errors.New("not a whole number")
		}
		n, err := strconv.ParseUint(string(raw), 10, 64)
		if err != nil {
			return nil, err
		}
		out[name] = n
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	return out, nil
}

// scannerDecode is decodeObject with the members referenceDecode knows.
func scannerDecode(body []byte) (map[string]any, error) {
	var s string
	var n, m uint64
	fs := []*field{{name: "s", str: &s}, {name: "n", num: &n}, {name: "m", num: &m}}
	if err := decodeObject(body, fs); err != nil {
		return nil, err
	}
	out := map[string]any{}
	if fs[0].seen {
		out["s"] = s
	}
	if fs[1].seen {
		out["n"] = n
	}
	if fs[2].seen {
		out["m"] = m
	}
	return out, nil
}

func checkLikeReference(t *testing.T, body []byte) {
	t.Helper()
	want, werr := referenceDecode(body)
	got, gerr := scannerDecode(body)
	switch {
	case werr != nil && gerr == nil:
		t.Fatalf("%q: decodeObject accepted it as %v; encoding/json refuses it: %v", body, got, werr)
	case werr == nil && gerr != nil:
		t.Fatalf("%q: decodeObject refused it (%v); encoding/json reads %v", body, gerr, want)
	case gerr != nil:
		var re *requestError
		if !errors.As(gerr, &re) || re.status != 400 {
			t.Fatalf("%q: refused with %v, want a 400 requestError", body, gerr)
		}
	case len(got) != len(want):
		t.Fatalf("%q: decodeObject read %v, encoding/json %v", body, got, want)
	default:
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%q: member %s is %#v, encoding/json reads %#v", body, k, got[k], v)
			}
		}
	}
}

// tricky are bodies at the edges of the grammar, kept as fuzz seeds too.
var tricky = []string{
	``, ` `, `{}`, ` {} `, "{}\n", "\t{\r\n}\t", `{`, `}`, `{}}`, `{}{}`, `{} x`, `[]`, `null`, `"s"`, `1`,
	`{"s":"a"}`, `{"s":"a","n":1,"m":2}`, `{ "s" : "a" , "n" : 1 }`, `{"s":"a",}`, `{,"s":"a"}`, `{"s":"a""n":1}`,
	`{"s":"a" "n":1}`, `{"s"}`, `{"s":}`, `{"s" "a"}`, `{s:"a"}`, `{'s':'a'}`, `{"S":"a"}`, `{"s":"a","s":"b"}`,
	`{"\u0073":"a"}`, `{"s":"a","\u0073":"b"}`, `{"s\u0000":"a"}`, `{"s":"\u00e9\ud83d\ude00"}`, `{"s":"\ud800"}`,
	`{"s":"a\"b\\c\/d\b\f\n\r\t"}`, `{"s":"\x"}`, `{"s":"\u12"}`, `{"s":"\u12G4"}`, "{\"s\":\"a\nb\"}", "{\"s\":\"a\x00\"}",
	"{\"s\":\"\xff\"}", "{\"s\":\"\xc3\"}", "{\"\xff\":1}", "\xef\xbb\xbf{}", "{\"s\":\"a\"}\x00", `{"s":"a`, `{"s":"a\`,
	`{"s":"a\"}`, `{"s":1}`, `{"s":null}`, `{"s":true}`, `{"s":{}}`, `{"s":[]}`, `{"n":"1"}`, `{"n":null}`,
	`{"n":0}`, `{"n":00}`, `{"n":01}`, `{"n":-0}`, `{"n":-1}`, `{"n":1.0}`, `{"n":1.}`, `{"n":.1}`, `{"n":1e3}`,
	`{"n":1E3}`, `{"n":1e}`, `{"n":+1}`, `{"n":1x}`, `{"n":1 2}`, `{"n":18446744073709551615}`,
	`{"n":18446744073709551616}`, `{"n":99999999999999999999}`, `{"n":true}`, `{"n":{}}`, `{"n":1`, `{"n":`,
	`{"x":1}`, `{"x":{"y":[1,2]}}`, `{"s":"a","x":`, "{\"n\":1}\n\n", `{"n":1}]`,
}

func TestDecodeObjectMatchesEncodingJSON(t *testing.T) {
	for _, body := range tricky {
		checkLikeReference(t, []byte(body))
	}
}

func FuzzDecodeObject(f *testing.F) {
	for _, body := range tricky {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkLikeReference(t, body) })
}

// oneByteReader returns its data a byte per Read, and io.EOF only on the
// Read after the last byte, as a reader may.
type oneByteReader struct{ b []byte }

func (r *oneByteReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0], r.b = r.b[0], r.b[1:]
	return 1, nil
}

func TestReadBody(t *testing.T) {
	body := []byte(`{"owner":"a","ttl_ms":100}`)
	n := int64(len(body))
	for _, length := range []int64{-1, 0, 1, n - 1, n, n + 1, 100 * n} {
		for name, r := range map[string]func() io.Reader{
			"bytes.Reader":   func() io.Reader { return bytes.NewReader(body) },
			"byte at a time": func() io.Reader { return &oneByteReader{b: body} },
		} {
			got, err := readBody(r(), length, 64)
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("%s announced as %d bytes: read %q, %v; want %q", name, length, got, err, body)
			}
			// Into a buffer to reuse, too small, just large enough, and
			// larger, holding old bytes: its room is used when it
			// suffices, and the body read is the same.
			for _, room := range []int{0, 1, int(n) - 1, int(n), int(n) + 1, 1000} {
				buf := bytes.Repeat([]byte("x"), room)
				got, err := readBodyInto(buf, r(), length, 64)
				if err != nil || !bytes.Equal(got, body) {
					t.Errorf("%s announced as %d bytes into %d bytes of room: read %q, %v; want %q", name, length, room, got, err, body)
				}
				if room == 1000 && &got[0] != &buf[0] {
					t.Errorf("%s announced as %d bytes: read into a new buffer, not the %d bytes of room given", name, length, room)
				}
			}
		}
	}
	failing := io.MultiReader(bytes.NewReader(body), iotest.ErrReader(errBroken))
	if _, err := readBody(failing, n+10, 64); !errors.Is(err, errBroken) {
		t.Errorf("a broken body: %v, want %v", err, errBroken)
	}
	failing = io.MultiReader(bytes.NewReader(body), iotest.ErrReader(errBroken))
	if _, err := readBodyInto(make([]byte, 10), failing, -1, 64); !errors.Is(err, errBroken) {
		t.Errorf("a broken body into a buffer: %v, want %v", err, errBroken)
	}
}

var errBroken = errors.New("connection broke")

// special8 flags exactly the words with a byte str must look at.
func TestSpecial8(t *testing.T) {
	edges := []byte{0x00, 0x01, 0x1f, 0x20, 0x21, '"' - 1, '"', '"' + 1, '\\' - 1, '\\', '\\' + 1, 'a', 0x7e, 0x7f, 0x80, 0x81, 0xc3, 0xfe, 0xff}
	r := rand.New(rand.NewPCG(3, 4))
	for range 200000 {
		var w [8]byte
		want := false
		for i := range w {
			w[i] = edges[r.IntN(len(edges))]
			if r.IntN(3) > 0 {
				w[i] = byte(0x20 + r.IntN(0x5f)) // mostly plain printable ASCII
			}
			c := w[i]
			want = want || c < 0x20 || c >= 0x80 || c == '"' || c == '\\'
		}
		if got := special8(binary.LittleEndian.Uint64(w[:])); got != want {
			t.Fatalf("special8(%q) = %v, want %v", w[:], got, want)
		}
	}
}
