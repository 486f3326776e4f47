package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/internal/testkit/poll"
	"github.com/leasehq/lease/leasehttp"
)

// Tokens of the reload tests: long enough not to be warned about.
const (
	oldToken = "old-token-0123456789abcdef"
	newToken = "new-token-0123456789abcdef"
)

// writeTokens writes a tokens file with mode 0600.
func writeTokens(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	// WriteFile keeps the mode of a file that exists.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

// countingTransport is an http.Transport that counts the connections it
// dials, to show that requests after a reload reuse one opened before it.
func countingTransport(t *testing.T, tlsConfig *tls.Config) (*http.Transport, *atomic.Int32) {
	t.Helper()
	var dials atomic.Int32
	tr := &http.Transport{
		TLSClientConfig: tlsConfig,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return tr, &dials
}

// checkRotated checks the server after the tokens file went from oldToken to
// newToken and the reload: the lease taken before is still held and renews
// under the new token with the same fencing token, the old token is refused
// 401, and all of it went over the one connection opened before the reload.
func checkRotated(t *testing.T, base string, tr *http.Transport, dials *atomic.Int32, held lease.Lease) {
	t.Helper()
	hc := &http.Client{Transport: tr}
	oldC := httpClient(t, base, leasehttp.WithAuthToken(oldToken), leasehttp.WithHTTPClient(hc))
	newC := httpClient(t, base, leasehttp.WithAuthToken(newToken), leasehttp.WithHTTPClient(hc))
	if _, err := oldC.Get(t.Context(), held.Key); !errors.Is(err, leasehttp.ErrUnauthorized) {
		t.Errorf("old token after the reload: Get = %v, want ErrUnauthorized", err)
	}
	renewed, err := newC.Renew(t.Context(), held, time.Minute)
	if err != nil {
		t.Fatalf("renewing the lease taken before the reload, with the new token: %v", err)
	}
	if renewed.Token != held.Token || renewed.ID != held.ID {
		t.Errorf("renewed %+v; want the lease taken before the reload, token %d", renewed, held.Token)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections dialled; want the one opened before the reload kept", n)
	}
}

// TestServeReloadRotatesTokens rotates the tokens file under a running
// server and reloads it: leases and connections stay, the old token is
// refused and the new one accepted, one INFO line says so without a token.
func TestServeReloadRotatesTokens(t *testing.T) {
	var logs syncBuffer
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, oldToken+" jobs/\n")
	cfg := serveConfig(t, &logs)
	cfg.AuthTokensFile = tokens
	s := startServe(t, cfg)
	base := "http://" + s.Addr()

	tr, dials := countingTransport(t, nil)
	before := httpClient(t, base, leasehttp.WithAuthToken(oldToken), leasehttp.WithHTTPClient(&http.Client{Transport: tr}))
	held, err := before.Acquire(t.Context(), "jobs/nightly", "cron", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	writeTokens(t, tokens, "# rotated\n"+newToken+" jobs/\nsecond-token-0123456789 cron/\n")
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	checkRotated(t, base, tr, dials, held)

	out := logs.String()
	if n := strings.Count(out, "msg=reloaded"); n != 1 || !strings.Contains(out, "msg=reloaded credentials=2") {
		t.Errorf("want one INFO line msg=reloaded credentials=2 in the log:\n%s", out)
	}
	if strings.Contains(out, "token-0123456789") {
		t.Errorf("the log shows a token:\n%s", out)
	}
}

// TestServeReloadFailureKeepsCredentials: a reload that cannot load the
// tokens file, or the certificate, changes nothing and logs why.
func TestServeReloadFailureKeepsCredentials(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeTokens(t, tokens, oldToken+" *\n")
	certFile, keyFile, cert1 := writeCert(t, dir, 1)
	pool := x509.NewCertPool()
	pool.AddCert(cert1)
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	cfg.AuthTokensFile, cfg.TLSCert, cfg.TLSKey = tokens, certFile, keyFile
	s := startServe(t, cfg)
	base := "https://" + s.Addr()

	// status answers a GET with token over a new connection, and the
	// serial number of the certificate that connection got.
	status := func(token string) (int, *big.Int) {
		t.Helper()
		tr, _ := countingTransport(t, &tls.Config{RootCAs: pool})
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/leases", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber
	}

	for _, tc := range []struct {
		name  string
		setup func(t *testing.T)
		want  string
	}{
		{"missing tokens file", func(t *testing.T) {
			if err := os.Remove(tokens); err != nil {
				t.Fatal(err)
			}
		}, "no such file"},
		{"unparsable tokens file", func(t *testing.T) { writeTokens(t, tokens, newToken+"\n") }, "line 1"},
		{"empty tokens file", func(t *testing.T) { writeTokens(t, tokens, "# nobody yet\n") }, "no credentials"},
		{"bad certificate", func(t *testing.T) {
			writeTokens(t, tokens, newToken+" *\n") // good, but not without the certificate
			if err := os.WriteFile(certFile, []byte("not a certificate\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "TLS key pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup(t)
			logged := strings.Count(logs.String(), "msg=\"reload failed")
			err := s.Reload()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Reload = %v; want an error mentioning %q", err, tc.want)
			}
			if n := strings.Count(logs.String(), "level=ERROR msg=\"reload failed"); n != logged+1 {
				t.Errorf("want one more ERROR line about the failed reload:\n%s", logs.String())
			}
			if code, serial := status(oldToken); code != 200 || serial.Int64() != 1 {
				t.Errorf("old token after the failed reload: HTTP %d with certificate %v; want 200 with certificate 1", code, serial)
			}
			if code, _ := status(newToken); code != 401 {
				t.Errorf("new token after the failed reload: HTTP %d; want 401 (nothing changed)", code)
			}
		})
	}
	if strings.Contains(logs.String(), "msg=reloaded") {
		t.Errorf("a failed reload logged success:\n%s", logs.String())
	}
}

// TestServeReloadTLSCertificate replaces the certificate and reloads: new
// handshakes get the new certificate, a connection opened before keeps
// working with the old one.
func TestServeReloadTLSCertificate(t *testing.T) {
	dir, next := t.TempDir(), t.TempDir()
	certFile, keyFile, cert1 := writeCert(t, dir, 1)
	nextCert, nextKey, cert2 := writeCert(t, next, 2)
	pool := x509.NewCertPool()
	pool.AddCert(cert1)
	pool.AddCert(cert2)
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	cfg.TLSCert, cfg.TLSKey = certFile, keyFile
	s := startServe(t, cfg)
	url := "https://" + s.Addr() + "/healthz"

	serial := func(tr *http.Transport) int64 {
		t.Helper()
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("GET /healthz: HTTP %d", resp.StatusCode)
		}
		return resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	before, beforeDials := countingTransport(t, &tls.Config{RootCAs: pool})
	if got := serial(before); got != 1 {
		t.Fatalf("certificate %d before the reload, want 1", got)
	}

	for _, f := range [][2]string{{nextCert, certFile}, {nextKey, keyFile}} {
		if err := os.Rename(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	after, _ := countingTransport(t, &tls.Config{RootCAs: pool})
	if got := serial(after); got != 2 {
		t.Errorf("a new handshake after the reload got certificate %d, want 2; log:\n%s", got, logs.String())
	}
	if got := serial(before); got != 1 || beforeDials.Load() != 1 {
		t.Errorf("the connection opened before the reload: certificate %d after %d dials; want it kept (certificate 1, one dial)", got, beforeDials.Load())
	}
	if !strings.Contains(logs.String(), "msg=reloaded credentials=0 tls=true") {
		t.Errorf("no reload line in the log:\n%s", logs.String())
	}
}

// TestServeReloadNothing: without a tokens file or TLS a reload only says
// there is nothing to reload.
func TestServeReloadNothing(t *testing.T) {
	var logs syncBuffer
	s := startServe(t, serveConfig(t, &logs))
	if err := s.Reload(); err != nil {
		t.Fatalf("Reload = %v", err)
	}
	if !strings.Contains(logs.String(), "nothing to reload") {
		t.Errorf("the log does not say there is nothing to reload:\n%s", logs.String())
	}
}

// TestServeWarnsAboutWeakTokensFile: a tokens file others may read and a
// short token are warned about at start and at every reload, naming the
// line, never the token.
func TestServeWarnsAboutWeakTokensFile(t *testing.T) {
	const short = "short-tok"
	tokens := filepath.Join(t.TempDir(), "tokens")
	writeTokens(t, tokens, "# ops\n"+oldToken+" *\n"+short+" jobs/\n")
	if err := os.Chmod(tokens, 0o644); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	cfg := serveConfig(t, &logs)
	cfg.AuthTokensFile = tokens
	s := startServe(t, cfg)

	check := func(when string, want int) {
		t.Helper()
		out := logs.String()
		if n := strings.Count(out, "level=WARN msg=\"leasehttp: credentials file has mode 0644"); n != want {
			t.Errorf("%s: %d warnings about the mode, want %d:\n%s", when, n, want, out)
		}
		if n := strings.Count(out, "level=WARN msg=\"leasehttp: credentials line 3: token shorter than 16 bytes"); n != want {
			t.Errorf("%s: %d warnings about line 3's token, want %d:\n%s", when, n, want, out)
		}
		if strings.Contains(out, short) || strings.Contains(out, oldToken) {
			t.Errorf("%s: the log shows a token:\n%s", when, out)
		}
	}
	check("at start", 1)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	check("after a reload", 2)

	writeTokens(t, tokens, oldToken+" *\n") // fixed: 0600, long tokens only
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	check("after a reload of the fixed file", 2)
}

// TestBinaryServeReloadsOnSIGHUP sends a real SIGHUP to a `lease serve`
// process whose tokens file was rotated: it must keep running, log the
// reload, keep the lease and the connection, refuse the old token and
// accept the new one.
func TestBinaryServeReloadsOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeTokens(t, tokens, oldToken+" jobs/\n")
	serve := startBinary(t, nil, "serve", "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data"), "--auth-tokens-file", tokens)
	base := "http://" + listeningAddr(t, serve)

	tr, dials := countingTransport(t, nil)
	before := httpClient(t, base, leasehttp.WithAuthToken(oldToken), leasehttp.WithHTTPClient(&http.Client{Transport: tr}))
	held, err := before.Acquire(t.Context(), "jobs/nightly", "cron", time.Minute)
	if err != nil {
		t.Fatal(err)
	}

	writeTokens(t, tokens, newToken+" jobs/\n")
	if err := serve.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, func() error {
		if strings.Contains(serve.stderr.String(), "msg=reloaded credentials=1") {
			return nil
		}
		select {
		case <-serve.done:
			t.Fatalf("serve ended on SIGHUP (%v); log:\n%s", serve.cmd.ProcessState, serve.stderr.String())
		default:
		}
		return fmt.Errorf("serve did not log a reload after SIGHUP; log:\n%s", serve.stderr.String())
	})
	checkRotated(t, base, tr, dials, held)

	if err := serve.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := serve.wait(t, 20*time.Second); code != 0 {
		t.Errorf("serve exited %d after SIGTERM; log:\n%s", code, serve.stderr.String())
	}
}

// listeningAddr waits for p's "listening" log line and returns its
// address, failing t if p exits first.
func listeningAddr(t *testing.T, p *process) string {
	t.Helper()
	var addr string
	poll.Until(t, 20*time.Second, func() error {
		if m := listeningRE.FindStringSubmatch(p.stderr.String()); m != nil {
			addr = m[1]
			return nil
		}
		select {
		case <-p.done:
			t.Fatalf("serve exited: %q", p.stderr.String())
		default:
		}
		return fmt.Errorf("serve never said where it listens: %q", p.stderr.String())
	})
	return addr
}
