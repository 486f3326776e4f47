package cli

import (
	"io"
	"strings"
	"testing"
)

// TestRedactHidesEveryPassword: a password can sit in a URL's query
// (postgres://u@db/x?password=…, which pgx reads), in a keyword/value
// connection string, or in an etcd:// URL's userinfo; none of them may reach
// the serve log's backend= field or an error message.
func TestRedactHidesEveryPassword(t *testing.T) {
	// redact itself: TestRedact's table.
	for _, spec := range []string{
		"host=db user=u password=secret dbname=x",
		"etcd://u:secret@h1:2379",
		"etcd://h1:2379,u:secret@h2",
	} {
		cfg := serveConfig(t, io.Discard)
		cfg.DataDir, cfg.Backend = "", spec
		s, err := NewServer(cfg)
		if err == nil {
			err = s.Run(t.Context())
			if err == nil {
				_ = s.Close()
				t.Fatalf("%q: the server started", spec)
			}
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("--backend %q: error %q shows the password", spec, err)
		}
	}
}

// TestEtcdSpecPortIsANumber: a typo in an etcd endpoint's port is a usage
// error at once, not a 30 s wait for a connection that cannot be made.
func TestEtcdSpecPortIsANumber(t *testing.T) {
	for _, spec := range []string{"etcd://h:abc", "etcd://h1:2379,h2:0", "etcd://h:70000/p"} {
		if eps, prefix, err := parseEtcdSpec(spec); err == nil {
			t.Errorf("%q: parsed as %v %q", spec, eps, prefix)
		}
	}
}
