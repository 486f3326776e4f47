package deploy_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	unitFile     = "systemd/lease.service"
	sysusersFile = "systemd/lease.sysusers"
)

// unit is a systemd unit file: section → key → values, in order.
type unit map[string]map[string][]string

func (u unit) get(t *testing.T, section, key string) string {
	t.Helper()
	v := u[section][key]
	if len(v) != 1 {
		t.Fatalf("%s: [%s] %s= is set %d times, want once", unitFile, section, key, len(v))
	}
	return v[0]
}

// readUnit reads a unit file (systemd.syntax(7): sections, KEY=VALUE,
// comments, lines continued with a backslash).
func readUnit(t *testing.T) unit {
	t.Helper()
	raw, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	var pending string
	for i, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if pending != "" {
			line = pending + " " + line
			pending = ""
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
			continue
		case strings.HasSuffix(line, `\`):
			pending = strings.TrimSuffix(line, `\`)
			continue
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: %q is not KEY=VALUE in a section", unitFile, i+1, line)
		}
		u[section][key] = append(u[section][key], value)
	}
	return u
}

// execStart returns ExecStart='s command line, split into words.
func execStart(t *testing.T, u unit) []string {
	t.Helper()
	line := u.get(t, "Service", "ExecStart")
	if strings.ContainsAny(line, `"'`) {
		t.Fatalf("ExecStart=%s: quotes are more than this test splits", line)
	}
	args := strings.Fields(line)
	if len(args) < 2 || !filepath.IsAbs(args[0]) || filepath.Base(args[0]) != "lease" || args[1] != "serve" {
		t.Fatalf("ExecStart=%s: want /…/lease serve FLAGS", line)
	}
	return args
}

// The unit asks for what its comments and deploy/README.md promise.
func TestSystemdUnitHardening(t *testing.T) {
	u := readUnit(t)
	for key, want := range map[string]string{
		"Type": "exec", "User": "lease", "Group": "lease", "StateDirectory": "lease", "StateDirectoryMode": "0700",
		"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
		"NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "RestrictSUIDSGID": "yes", "UMask": "0077",
		"KillSignal": "SIGTERM", "ExecReload": "/bin/kill -HUP $MAINPID", "Restart": "on-failure",
	} {
		if got := u.get(t, "Service", key); got != want {
			t.Errorf("%s=%s, want %s", key, got, want)
		}
	}
	users, err := os.ReadFile(sysusersFile)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^u lease `).Match(users) {
		t.Errorf("%s does not create the user lease", sysusersFile)
	}
}

// The unit's ExecStart runs the real lease serve, with every flag as
// written: only its paths are moved into a temporary directory and --addr
// to a free loopback port. The server comes up with TLS and tokens, reloads
// on the unit's ExecReload signal, and stops cleanly on its KillSignal
// within TimeoutStopSec.
func TestSystemdUnitRunsServe(t *testing.T) {
	u := readUnit(t)
	args := execStart(t, u)
	dir := t.TempDir()
	etc, state := filepath.Join(dir, "etc"), filepath.Join(dir, "state")
	mode, err := strconv.ParseUint(u.get(t, "Service", "StateDirectoryMode"), 8, 32)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(state, os.FileMode(mode)); err != nil {
		t.Fatal(err)
	}
	token := strings.Repeat("k", 40)
	pool := writeEtc(t, etc, token)

	var run []string
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--addr":
			if i+1 >= len(args) {
				t.Fatal("--addr without a value")
			}
			if _, _, err := net.SplitHostPort(args[i+1]); err != nil {
				t.Fatalf("--addr %s: %v", args[i+1], err)
			}
			run = append(run, a, "127.0.0.1:0")
			i++
			continue
		case a == "${STATE_DIRECTORY}":
			a = state
		case strings.HasPrefix(a, "/etc/lease/"):
			a = filepath.Join(etc, strings.TrimPrefix(a, "/etc/lease/"))
		case strings.ContainsAny(a, "$%"):
			t.Fatalf("ExecStart argument %q: a substitution this test does not know", a)
		}
		run = append(run, a)
	}
	srv, addr := startServe(t, append([]string{"serve"}, run...)...)
	listening := srv.listening
	for _, want := range []string{"tls=true", "auth=true", "backend="} {
		if !strings.Contains(listening, want) {
			t.Errorf("listening line %q lacks %s", listening, want)
		}
	}
	if warn := regexp.MustCompile(`(?m)level=(WARN|ERROR).*`).FindString(srv.logText()); warn != "" {
		t.Errorf("lease serve warns with the unit's flags: %s", warn)
	}

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/v1/leases?prefix=", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/leases with the token: %d", resp.StatusCode)
	}

	if reload := u.get(t, "Service", "ExecReload"); !strings.Contains(reload, "-HUP") {
		t.Fatalf("ExecReload=%s does not send SIGHUP", reload)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	srv.waitLine(t, "msg=reloaded", 10*time.Second)

	stop, err := time.ParseDuration(u.get(t, "Service", "TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	if sig := u.get(t, "Service", "KillSignal"); sig != "SIGTERM" {
		t.Fatalf("KillSignal=%s", sig)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
	case <-time.After(stop):
		t.Fatalf("lease serve still running %v after SIGTERM (TimeoutStopSec)", stop)
	}
	if code := srv.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("lease serve exited %d after SIGTERM; log:\n%s", code, srv.logText())
	}
	if _, err := os.Stat(filepath.Join(state, "lease.db")); err != nil {
		t.Errorf("no store in the state directory: %v", err)
	}
}

// writeEtc writes what the unit reads from /etc/lease into dir, as
// deploy/README.md says to install it (mode 0600): a tokens file with token
// for every key, and a self-signed certificate for 127.0.0.1 with its key.
// It returns a pool that trusts the certificate.
func writeEtc(t *testing.T, dir, token string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "lease deploy test"},
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
	for name, body := range map[string][]byte{
		"tokens":   []byte(token + " *\n"),
		"cert.pem": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		"key.pem":  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// systemdTool finds a systemd program, which scripts/deps.sh installs
// (only -short skips the checks that need it).
func systemdTool(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: skipping a check that needs %s", name)
	}
	path, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found (%v): install systemd's tools (make deps, or Debian: apt-get install systemd)", name, err)
	}
	return path
}

// systemd-analyze verify finds nothing to say about the unit, and its
// security review rates it exposed at most 2.0 (of 10).
func TestSystemdAnalyze(t *testing.T) {
	analyze := systemdTool(t, "systemd-analyze")
	u := readUnit(t)
	args := execStart(t, u)
	raw, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	// verify checks that ExecStart's program exists: point it at the one
	// built from this tree, the only change to the unit.
	text := strings.Replace(string(raw), "ExecStart="+args[0]+" ", "ExecStart="+leaseBinary(t)+" ", 1)
	path := filepath.Join(t.TempDir(), "lease.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	out, err = exec.Command(analyze, "security", "--offline=true", "--no-pager", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for lease\.service: ([0-9.]+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in\n%s", out)
	}
	level, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: exposure %.1f", level)
	if level > 2.0 {
		t.Errorf("exposure level %.1f, want at most 2.0:\n%s", level, out)
	}
}

// systemd-sysusers accepts lease.sysusers and would create the user and
// group the unit runs as.
func TestSysusers(t *testing.T) {
	sysusers := systemdTool(t, "systemd-sysusers")
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// With --root, a relative file name is looked up under the root.
	abs, err := filepath.Abs(sysusersFile)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(sysusers, "--dry-run", "--root="+root, abs).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-sysusers: %v\n%s", err, out)
	}
	for _, want := range []string{"Creating group 'lease'", "Creating user 'lease'"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("systemd-sysusers says\n%s\nwant %q", out, want)
		}
	}
}
