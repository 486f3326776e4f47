package etcdstore

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/leasehq/lease"
)

// holderValue writes the info JSON by hand: whatever the owner, the value
// must start with the ID and NUL, be valid JSON after it, and decode to what
// was written.
func TestHolderValueRoundTrips(t *testing.T) {
	owners := []string{
		"bench", "worker-7@host:42", `quote"inside`, `back\slash`, "<html>&amp;",
		"ünïcødé", "日本語", "line\u2028sep\u2029", "emoji 🔒", " leading and trailing ",
		strings.Repeat("o", lease.MaxKeyLen),
	}
	for _, owner := range owners {
		if err := lease.ValidateOwner(owner); err != nil {
			t.Fatalf("test owner %q is not valid: %v", owner, err)
		}
		id := lease.NewID()
		v := holderValue(id, owner, 1500*time.Millisecond, 3, time.UnixMicro(1_700_000_000_123_456))
		head, js, ok := strings.Cut(v, "\x00")
		if !ok || head != id.Reveal() {
			t.Fatalf("owner %q: value %q does not start with the ID and NUL", owner, v)
		}
		if !json.Valid([]byte(js)) {
			t.Fatalf("owner %q: %q is not valid JSON", owner, js)
		}
		in, err := decodeInfo(&mvccpb.KeyValue{Key: []byte("k"), Value: []byte(v)})
		if err != nil {
			t.Fatalf("owner %q: %v", owner, err)
		}
		want := info{Owner: owner, TTLms: 1500, EtcdTTL: 3, ExpUS: 1_700_000_000_123_456}
		if in != want {
			t.Fatalf("owner %q: decoded %+v, want %+v", owner, in, want)
		}
		// The same bytes json.Marshal gives, where it has nothing to escape.
		if m, _ := json.Marshal(want); !strings.ContainsAny(owner, `"\<>&`) && owner == strings.ToValidUTF8(owner, "") &&
			isPrintableASCII(owner) && !bytes.Equal(m, []byte(js)) {
			t.Fatalf("owner %q: %s, json.Marshal gives %s", owner, js, m)
		}
	}
}

func isPrintableASCII(s string) bool {
	for i := range len(s) {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}
