package cli

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/etcdtest"
	"github.com/leasehq/lease/internal/testkit/pgtest"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/internal/testkit/redistest"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/redisstore"
)

// syncBuffer is a log sink the server and the test read at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func serveConfig(t *testing.T, logs io.Writer) ServeConfig {
	return DefaultServeConfig(filepath.Join(t.TempDir(), "data"), slog.New(slog.NewTextHandler(logs, nil)))
}

// startServe runs a Server until the test ends.
func startServe(t *testing.T, cfg ServeConfig) *Server {
	t.Helper()
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func httpClient(t *testing.T, base string, opts ...leasehttp.ClientOption) *leasehttp.Client {
	t.Helper()
	c, err := leasehttp.NewClient(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestServeShutdownAnswersWaitersAndKeepsLeases starts the server on port
// 0, leaves a request waiting for a held key, and shuts down: the waiter must
// get an answer (503 unavailable), not a cut connection, and the held lease
// must be there when the server comes back on the same directory.
func TestServeShutdownAnswersWaitersAndKeepsLeases(t *testing.T) {
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "msg=listening addr="+s.Addr()) {
		t.Errorf("log does not say where it listens: %q", logs.String())
	}
	fi, err := os.Stat(cfg.DataDir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("data dir: %v, mode %v; want 0700", err, fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, BoltFile)); err != nil {
		t.Errorf("no store file: %v", err)
	}

	base := "http://" + s.Addr()
	c := httpClient(t, base)
	held, err := c.Acquire(t.Context(), "job", "holder", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	type answer struct {
		status int
		body   string
		err    error
	}
	waiter := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/leases/job/acquire", strings.NewReader(`{"owner":"waiter","ttl_ms":1000,"wait_ms":60000}`))
		req.Header.Set("Content-Type", "application/json")
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			waiter <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		waiter <- answer{status: resp.StatusCode, body: string(body)}
	}()
	waitMetric(t, base, "lease_waiters 1")

	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	a := <-waiter
	if a.err != nil || a.status != http.StatusServiceUnavailable || !strings.Contains(a.body, `"unavailable"`) {
		t.Errorf("waiter got %d %q (%v); want a 503 unavailable answer", a.status, a.body, a.err)
	}
	if !strings.Contains(logs.String(), "msg=stopped") {
		t.Errorf("log does not say it stopped: %q", logs.String())
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	s2 := startServe(t, cfg)
	got, err := httpClient(t, "http://"+s2.Addr()).Get(t.Context(), "job")
	if err != nil || got.Token != held.Token || got.Owner != "holder" {
		t.Errorf("after restart Get = %+v, %v; want token %d held by holder", got, err, held.Token)
	}
}

// waitMetric polls /metrics until a line equals want.
func waitMetric(t *testing.T, base, want string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	var last string
	poll.Until(t, 10*time.Second, func() error {
		resp, err := hc.Get(base + "/metrics")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			last = string(body)
			for _, line := range strings.Split(last, "\n") {
				if line == want {
					return nil
				}
			}
		}
		return fmt.Errorf("/metrics never had %q; last:\n%s", want, last)
	})
}

func TestServeWarnsWithoutCredentials(t *testing.T) {
	var logs syncBuffer
	startServe(t, serveConfig(t, &logs))
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "no credentials") {
		t.Errorf("no warning about missing credentials in %q", out)
	}
}

func TestServeRefusals(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# nobody\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		edit     func(*ServeConfig)
		wantCode int
		want     string
	}{
		{"all interfaces without credentials", func(c *ServeConfig) { c.Addr = ":0" }, ExitFailure, "--insecure"},
		{"public address without credentials", func(c *ServeConfig) { c.Addr = "192.0.2.1:0" }, ExitFailure, "--insecure"},
		{"missing tokens file", func(c *ServeConfig) { c.AuthTokensFile = filepath.Join(dir, "nope") }, ExitFailure, "--auth-tokens-file"},
		{"empty tokens file", func(c *ServeConfig) { c.AuthTokensFile = empty }, ExitUsage, "no credentials"},
		{"cert without key", func(c *ServeConfig) { c.TLSCert = empty }, ExitUsage, "--tls-key"},
		{"unloadable key pair", func(c *ServeConfig) { c.TLSCert, c.TLSKey = empty, empty }, ExitFailure, "TLS"},
		{"bad addr", func(c *ServeConfig) { c.Addr = "7420" }, ExitUsage, "--addr"},
		{"port out of range", func(c *ServeConfig) { c.Addr = "127.0.0.1:99999" }, ExitUsage, "--addr"},
		{"negative port", func(c *ServeConfig) { c.Addr = "127.0.0.1:-1" }, ExitUsage, "--addr"},
		{"both stores", func(c *ServeConfig) { c.Backend = "redis://127.0.0.1:1" }, ExitUsage, "mutually exclusive"},
		{"unknown scheme", func(c *ServeConfig) { c.DataDir, c.Backend = "", "mysql://u:secret@h/db" }, ExitUsage, `"mysql"`},
		{"not a URL", func(c *ServeConfig) { c.DataDir, c.Backend = "", "localhost:6379" }, ExitUsage, "not a URL"},
		{"bad etcd endpoint", func(c *ServeConfig) { c.DataDir, c.Backend = "", "etcd://h1:2379,h2" }, ExitUsage, `"h2"`},
		{"bad shutdown timeout", func(c *ServeConfig) { c.ShutdownTimeout = 0 }, ExitUsage, "--shutdown-timeout"},
		{"zero read timeout", func(c *ServeConfig) { c.ReadTimeout = 0 }, ExitUsage, "--read-timeout"},
		{"zero read header timeout", func(c *ServeConfig) { c.ReadHeaderTimeout = 0 }, ExitUsage, "--read-header-timeout"},
		{"negative write timeout", func(c *ServeConfig) { c.WriteTimeout = -time.Second }, ExitUsage, "--write-timeout"},
		{"zero idle timeout", func(c *ServeConfig) { c.IdleTimeout = 0 }, ExitUsage, "--idle-timeout"},
		{"negative max connections", func(c *ServeConfig) { c.MaxConnections = -1 }, ExitUsage, "--max-connections"},
		{"negative max connections per address", func(c *ServeConfig) { c.MaxConnectionsPerAddress = -1 }, ExitUsage, "--max-connections-per-address"},
		{"max connections per address without a total", func(c *ServeConfig) { c.MaxConnections, c.MaxConnectionsPerAddress = 0, 10 }, ExitUsage, "needs --max-connections"},
		{"zero watch heartbeat", func(c *ServeConfig) { c.WatchHeartbeat = 0 }, ExitUsage, "--watch-heartbeat"},
		{"zero max watchers", func(c *ServeConfig) { c.MaxWatchers = 0 }, ExitUsage, "--max-watchers"},
		{"negative max wait", func(c *ServeConfig) { c.MaxWait = -time.Second }, ExitUsage, "--max-wait"},
		{"wait grace too long", func(c *ServeConfig) { c.WaitGrace = time.Hour }, ExitUsage, "--wait-grace"},
		{"allowed host with port", func(c *ServeConfig) { c.AllowedHosts = []string{"lease.internal:7420"} }, ExitUsage, "--allowed-hosts"},
		{"allowed hosts with credentials", func(c *ServeConfig) { c.AuthTokensFile, c.AllowedHosts = empty, []string{"lease.internal"} }, ExitUsage, "--allowed-hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serveConfig(t, io.Discard)
			tc.edit(&cfg)
			s, err := NewServer(cfg)
			if err == nil {
				err = s.Run(t.Context())
				if err == nil {
					_ = s.Close()
					t.Fatal("the server started")
				}
			}
			if code := exitCode(err); code != tc.wantCode || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q (exit %d); want exit %d mentioning %q", err, code, tc.wantCode, tc.want)
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("error %q shows a password", err)
			}
		})
	}
}

func TestServeWithCredentials(t *testing.T) {
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte("# ops\nops-token *\njobs-token jobs/\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := serveConfig(t, io.Discard)
	cfg.AuthTokensFile = tokens
	base := "http://" + startServe(t, cfg).Addr()

	b := func(token string) lease.Backend {
		if token == "" {
			return httpClient(t, base)
		}
		return httpClient(t, base, leasehttp.WithAuthToken(token))
	}
	for _, tc := range []struct {
		name, token, key string
		wantCode         int
		want             string
	}{
		{"no token", "", "jobs/a", ExitFailure, "unauthorized"},
		{"wrong token", "guess", "jobs/a", ExitFailure, "unauthorized"},
		{"outside its prefixes", "jobs-token", "other/a", ExitFailure, "forbidden"},
		{"inside its prefixes", "jobs-token", "jobs/a", ExitOK, ""},
		{"all keys", "ops-token", "other/a", ExitOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cli(t, b(tc.token), nil, nil, "acquire", tc.key, "--ttl", "1m")
			if r.code != tc.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", r.code, tc.wantCode, r.stderr)
			}
			if tc.want != "" {
				oneErrorLine(t, r, tc.want)
			}
		})
	}
}

func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	cfg := serveConfig(t, io.Discard)
	cfg.TLSCert, cfg.TLSKey = certFile, keyFile
	s := startServe(t, cfg)

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	c := httpClient(t, "https://"+s.Addr(), leasehttp.WithHTTPClient(&http.Client{Transport: tr}))
	if _, err := c.Acquire(t.Context(), "job", "tls", time.Minute); err != nil {
		t.Fatalf("acquire over TLS: %v", err)
	}
	plain := httpClient(t, "http://"+s.Addr())
	if _, err := plain.Get(t.Context(), "job"); err == nil {
		t.Error("plain HTTP to the TLS listener worked")
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns a
// pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	certFile, keyFile, cert := writeCert(t, dir, 1)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// writeCert writes a self-signed certificate for 127.0.0.1 with serial
// number serial, and its key, as cert.pem and key.pem in dir.
func writeCert(t *testing.T, dir string, serial int64) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "lease test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err = x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, cert
}

// TestServeBackends serves each engine through --backend and takes a lease
// through it.
func TestServeBackends(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec func(t *testing.T) string
	}{
		{"postgres", func(t *testing.T) string { return pgURL(t, pgtest.Start(t)) }},
		{"redis", func(t *testing.T) string { return "redis://" + redistest.Start(t).Addr + "/0" }},
		{"etcd", func(t *testing.T) string {
			return "etcd://" + strings.TrimPrefix(etcdtest.Start(t)[0], "http://") + "/serve-test"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serveConfig(t, io.Discard)
			cfg.DataDir, cfg.Backend = "", tc.spec(t)
			c := httpClient(t, "http://"+startServe(t, cfg).Addr())
			l, err := c.Acquire(t.Context(), "job", "o", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := c.Get(t.Context(), "job"); err != nil || got.Token != l.Token {
				t.Errorf("Get = %+v, %v; want token %d", got, err, l.Token)
			}
			if err := c.Release(t.Context(), l); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestServeRefusesVolatileRedis: a Redis that could lose acknowledged
// writes makes serve fail at start, saying why (I7).
func TestServeRefusesVolatileRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Volatile())
	cfg := serveConfig(t, io.Discard)
	cfg.DataDir, cfg.Backend = "", "redis://"+srv.Addr+"/0"
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(t.Context())
	if !errors.Is(err, redisstore.ErrVolatile) {
		_ = s.Close()
		t.Fatalf("Run = %v; want ErrVolatile", err)
	}
	if !strings.Contains(err.Error(), "--allow-volatile") {
		t.Errorf("Run = %v; want the flag that runs anyway named", err)
	}
}

// TestServeAllowVolatile: --allow-volatile serves a PostgreSQL or Redis
// that is not durable, and only those: the embedded store and etcd are
// always durable, so the flag there is a usage error.
func TestServeAllowVolatile(t *testing.T) {
	pg := pgtest.StartOwn(t, "fsync=off")
	for _, tc := range []struct {
		name string
		spec string
	}{
		{"postgres", pgURL(t, pg.URL)},
		{"redis", "redis://" + redistest.Start(t, redistest.Volatile()).Addr + "/0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := serveConfig(t, io.Discard)
			cfg.DataDir, cfg.Backend = "", tc.spec
			s, err := NewServer(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "--allow-volatile") {
				_ = s.Close()
				t.Fatalf("Run on a volatile server without --allow-volatile = %v; want a refusal naming the flag", err)
			}
			cfg.AllowVolatile = true
			c := httpClient(t, "http://"+startServe(t, cfg).Addr())
			if _, err := c.Acquire(t.Context(), "job", "o", time.Minute); err != nil {
				t.Fatalf("Acquire through --allow-volatile: %v", err)
			}
		})
	}
	for _, tc := range []struct {
		name string
		edit func(*ServeConfig)
	}{
		{"embedded", func(*ServeConfig) {}},
		{"etcd", func(c *ServeConfig) { c.DataDir, c.Backend = "", "etcd://127.0.0.1:1" }},
	} {
		cfg := serveConfig(t, io.Discard)
		tc.edit(&cfg)
		cfg.AllowVolatile = true
		s, err := NewServer(cfg)
		if err == nil {
			err = s.Run(t.Context())
			if err == nil {
				_ = s.Close()
			}
		}
		if exitCode(err) != ExitUsage || !strings.Contains(err.Error(), "--allow-volatile") {
			t.Errorf("%s with --allow-volatile: %v (exit %d); want a usage error naming the flag", tc.name, err, exitCode(err))
		}
	}
}

// pgURL turns a key/value connection string into the postgres:// form that
// --backend takes.
func pgURL(t *testing.T, conn string) string {
	t.Helper()
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		return conn
	}
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "postgres", User: url.User(cfg.User), Host: net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), Path: "/" + cfg.Database, RawQuery: "sslmode=disable"}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	}
	return u.String()
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7420": true, "127.1.2.3:1": true, "[::1]:7420": true, "localhost:7420": true,
		":7420": false, "0.0.0.0:7420": false, "[::]:7420": false, "10.0.0.1:7420": false, "example.com:7420": false, "bad": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestParseEtcdSpec(t *testing.T) {
	for _, tc := range []struct {
		spec      string
		endpoints string
		prefix    string
		bad       bool
	}{
		{spec: "etcd://h:2379", endpoints: "http://h:2379"},
		{spec: "etcd://h:2379/", endpoints: "http://h:2379"},
		{spec: "etcd://a:1,b:2/locks", endpoints: "http://a:1,http://b:2", prefix: "/locks/"},
		{spec: "etcd://a:1/team/locks/", endpoints: "http://a:1", prefix: "/team/locks/"},
		{spec: "etcd://a", bad: true},
		{spec: "etcd://a:1,,b:2", bad: true},
		{spec: "redis://a:1", bad: true},
	} {
		eps, prefix, err := parseEtcdSpec(tc.spec)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: parsed as %v %q", tc.spec, eps, prefix)
			}
			continue
		}
		if err != nil || strings.Join(eps, ",") != tc.endpoints || prefix != tc.prefix {
			t.Errorf("%q: %v %q %v; want %s %q", tc.spec, eps, prefix, err, tc.endpoints, tc.prefix)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@db:5432/x?sslmode=disable": "postgres://…@db:5432/x?sslmode=disable",
		"redis://:pw@h:6379/0":                      "redis://…@h:6379/0",
		"redis://h:6379/0":                          "redis://h:6379/0",
		"etcd://a:1,b:2/p":                          "etcd://a:1,b:2/p",
		// Passwords outside the userinfo (TestRedactHidesEveryPassword).
		"postgres://u@db:5432/x?password=secret&sslmode=disable":   "postgres://…@db:5432/x?password=…&sslmode=disable",
		"postgresql://db/x?sslmode=verify-full&sslpassword=secret": "postgresql://db/x?sslmode=verify-full&sslpassword=…",
		"postgres://db/x?PASSWORD=secret":                          "postgres://db/x?PASSWORD=…",
		"host=db user=u password=secret dbname=x":                  "host=db user=u password=… dbname=x",
		"host=db password='sec ret' dbname=x":                      "host=db password=… dbname=x",
		"postgres://db/x?sslmode=disable":                          "postgres://db/x?sslmode=disable",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// apiGet returns the body of a GET on the API, for comparing the command's
// JSON with the server's.
func apiGet(t *testing.T, url, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestServeBusyPortCreatesNoStore: a server that cannot listen fails before
// it opens the store, so it leaves no lease.db behind in a data dir the
// operator may have mistyped.
func TestServeBusyPortCreatesNoStore(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := serveConfig(t, io.Discard)
	cfg.Addr = busy.Addr().String()
	s, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(t.Context()); err == nil {
		_ = s.Close()
		t.Fatalf("Run on a port in use succeeded")
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, BoltFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after failing to listen, %s: %v; want it not created", filepath.Join(cfg.DataDir, BoltFile), err)
	}
}

// TestServeShutdownLogsNoErrorForWaiters: the waits a graceful shutdown ends
// (503, "the server is shutting down") are logged at INFO, not as failures:
// each waiting key used to add one ERROR line to every restart's log.
func TestServeShutdownLogsNoErrorForWaiters(t *testing.T) {
	var logs syncBuffer
	s := startServe(t, serveConfig(t, &logs))
	base := "http://" + s.Addr()
	c := httpClient(t, base)
	keys := []string{"a", "b"}
	answered := make(chan int, len(keys))
	for _, key := range keys {
		if _, err := c.Acquire(t.Context(), key, "holder", time.Minute); err != nil {
			t.Fatal(err)
		}
		go func() {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/leases/"+key+"/acquire", strings.NewReader(`{"owner":"waiter","ttl_ms":1000,"wait_ms":60000}`))
			req.Header.Set("Content-Type", "application/json")
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err != nil {
				answered <- 0
				return
			}
			resp.Body.Close()
			answered <- resp.StatusCode
		}()
	}
	waitMetric(t, base, fmt.Sprintf("lease_waiters %d", len(keys)))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range keys {
		if code := <-answered; code != http.StatusServiceUnavailable {
			t.Errorf("a waiter got %d, want 503", code)
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			t.Errorf("a graceful shutdown logged an error: %s", line)
		}
	}
	if n := strings.Count(logs.String(), "level=INFO msg=\"leasehttp: request\""); n != len(keys) {
		t.Errorf("%d waits ended by the shutdown logged at INFO, want %d:\n%s", n, len(keys), logs.String())
	}
}
