package ui_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/leasehttp"
)

// The dashboard is tested in Debian's headless Chromium, driven through the
// DevTools protocol (chromedp), against the real lease binary's serve with
// credentials: one server and one browser for all the subtests, a tab each.

const (
	adminToken = "admin-token-for-the-dashboard-test"
	jobsToken  = "jobs-token-for-the-dashboard-test"
)

// chromium finds the browser: $LEASE_CHROMIUM, else chromium (Debian's
// package) or Chrome on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the browser tests")
	}
	if p := os.Getenv("LEASE_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("LEASE_CHROMIUM=%s: %v", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium for the dashboard's browser tests: install it (Debian, as root: apt-get install chromium; " +
		"make test's scripts/deps.sh does), or name the binary in LEASE_CHROMIUM; go test -short skips these tests")
	return ""
}

// buildLease builds the lease binary into dir.
func buildLease(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "lease")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/leasehq/lease/cmd/lease").CombinedOutput()
	if err != nil {
		t.Fatalf("go build lease: %v\n%s", err, out)
	}
	return bin
}

// serveOptions are startServe's choices.
type serveOptions struct {
	bin     string // the lease binary; built when empty
	noAuth  bool   // serve without --auth-tokens-file
	addr    string // --addr; 127.0.0.1:0 when empty
	dataDir string // --data-dir; a new one when empty
}

var listeningRE = regexp.MustCompile(`msg=listening addr=(\S+)`)

// startServe runs `lease serve` on a loopback free port over a fresh data
// directory with the test's credentials, until the test ends, and returns
// its base URL.
func startServe(t *testing.T, opts serveOptions) (base, bin string) {
	t.Helper()
	dir := t.TempDir()
	bin = opts.bin
	if bin == "" {
		bin = buildLease(t, dir)
	}
	listen, dataDir := opts.addr, opts.dataDir
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	if dataDir == "" {
		dataDir = filepath.Join(dir, "data")
	}
	args := []string{"serve", "--addr", listen, "--data-dir", dataDir, "--max-watchers", "16"}
	if !opts.noAuth {
		tokens := filepath.Join(dir, "tokens")
		if err := os.WriteFile(tokens, []byte(adminToken+" *\n"+jobsToken+" jobs/\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--auth-tokens-file", tokens)
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	var logMu sync.Mutex
	addr := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			log.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := listeningRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			logMu.Lock()
			t.Logf("lease serve's log:\n%s", log.String())
			logMu.Unlock()
		}
	})
	select {
	case a := <-addr:
		return "http://" + a, bin
	case <-done:
		t.Fatalf("lease serve ended before listening:\n%s", log.String())
	case <-time.After(30 * time.Second):
		t.Fatal("lease serve did not say where it listens within 30 s")
	}
	return "", ""
}

// newBrowser starts headless Chromium for the test, with a user data
// directory of its own, and returns the context of its first tab.
func newBrowser(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	if err := chromedp.Do(browser); err != nil {
		t.Fatalf("starting Chromium (%s): %v", path, err)
	}
	return browser
}

// newTab opens a tab of browser (a tab has a sessionStorage of its own)
// for at most a minute.
func newTab(t *testing.T, browser context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(browser)
	tab, cancelTimeout := context.WithTimeout(tab, time.Minute)
	t.Cleanup(func() {
		cancelTimeout()
		cancel()
	})
	return tab
}

func run(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatal(err)
	}
}

// eval evaluates a JavaScript expression in the page; its value, decoded
// into T, is returned.
func eval[T any](t *testing.T, ctx context.Context, expr string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, opts...))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitFor polls expr in the page until it is true, for at most 15 s.
func waitFor(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(15*time.Second))); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText.slice(0, 2000)`))
		t.Fatalf("%s: %v; the page shows:\n%s", what, err, text)
	}
}

// login opens the dashboard in tab with the prefix and types token into
// its prompt.
func login(t *testing.T, tab context.Context, base, prefix, token string) {
	t.Helper()
	run(t, tab, chromedp.Navigate(base+"/ui/#prefix="+prefix))
	waitFor(t, tab, "the token prompt", `document.getElementById('auth').checkVisibility()`)
	run(t, tab,
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.CSS(`#auth-form button[type=submit]`)),
	)
	waitFor(t, tab, "the dashboard after the token", `document.getElementById('main').checkVisibility() && !document.getElementById('auth').checkVisibility() && document.getElementById('conn').dataset.state === 'live'`)
}

// rowSel is the selector of the table row of key.
func rowSel(key string) string { return fmt.Sprintf(`#rows .row[data-key=%q]`, key) }

func newClient(t *testing.T, base, token string) *leasehttp.Client {
	t.Helper()
	var opts []leasehttp.ClientOption
	if token != "" {
		opts = append(opts, leasehttp.WithAuthToken(token))
	}
	c, err := leasehttp.NewClient(base, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func acquire(t *testing.T, c *leasehttp.Client, key, owner string, ttl time.Duration) lease.Lease {
	t.Helper()
	l, err := c.Acquire(t.Context(), key, owner, ttl)
	if err != nil {
		t.Fatalf("acquire %s: %v", key, err)
	}
	return l
}

// pageHTML is the whole document as markup.
func pageHTML(t *testing.T, tab context.Context) string {
	return eval[string](t, tab, `document.documentElement.outerHTML`)
}

// artifactDir is where the test leaves its screenshots.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("LEASE_UI_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.ArtifactDir()
}

func screenshot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifactDir(t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

func TestDashboardInBrowser(t *testing.T) {
	browserPath := chromium(t)
	base, bin := startServe(t, serveOptions{})
	browser := newBrowser(t, browserPath)
	admin := newClient(t, base, adminToken)

	t.Run("NoTokenShowsPromptAndNoData", func(t *testing.T) {
		acquire(t, admin, "secret/plan", "mallory-must-not-see", time.Minute)
		tab := newTab(t, browser)
		run(t, tab, chromedp.Navigate(base+"/ui/"))
		waitFor(t, tab, "the token prompt", `document.getElementById('auth').checkVisibility()`)
		type shownT struct {
			Main bool `json:"main"`
			Rows int  `json:"rows"`
		}
		shown := eval[shownT](t, tab, `({main: document.getElementById('main').checkVisibility(), rows: document.querySelectorAll('#rows .row[data-key]').length})`)
		if shown.Main || shown.Rows != 0 {
			t.Errorf("without a token: main shown %v, %d rows; want the prompt alone", shown.Main, shown.Rows)
		}
		if html := pageHTML(t, tab); strings.Contains(html, "secret/plan") || strings.Contains(html, "mallory") {
			t.Error("without a token the page holds a lease's key or owner")
		}
		// A wrong token is refused and the prompt says so.
		run(t, tab,
			chromedp.SendKeys(chromedp.ID("token"), "not-a-token-of-this-server"),
			chromedp.Click(chromedp.CSS(`#auth-form button[type=submit]`)),
		)
		waitFor(t, tab, "the refusal", `document.getElementById('auth-error').textContent.includes('refused')`)
		stored := eval[string](t, tab, `String(sessionStorage.length) + (document.getElementById('token').value)`)
		if stored != "0" {
			t.Errorf("after a refused token: sessionStorage length + input = %q, want 0 and an empty input", stored)
		}
	})

	// Without credentials (loopback only) there is nothing to ask for.
	t.Run("NoCredentialsNoPrompt", func(t *testing.T) {
		open, _ := startServe(t, serveOptions{bin: bin, noAuth: true})
		c := newClient(t, open, "")
		l := acquire(t, c, "open/job", "anyone", time.Minute)
		tab := newTab(t, browser)
		run(t, tab, chromedp.Navigate(open+"/ui/"))
		waitFor(t, tab, "the dashboard", `document.getElementById('main').checkVisibility() && `+
			`!document.getElementById('auth').checkVisibility() && document.getElementById('conn').dataset.state === 'live'`)
		waitFor(t, tab, "open/job", fmt.Sprintf(`document.querySelector(%q + ' .c-token')?.textContent === '%d'`, rowSel("open/job"), l.Token))
		if eval[bool](t, tab, `document.getElementById('signout').checkVisibility()`) {
			t.Error("a page without a token offers to forget one")
		}
	})

	t.Run("ServerRestart", func(t *testing.T) {
		// A restart resets the server's counters: acquisitions/s must
		// take that as Prometheus's rate() does, never going negative; and
		// the active leases tile counts what the table lists, which a
		// restarted server's own tracking (leases granted through it since
		// it started) does not.
		dataDir := t.TempDir()
		const held = 30
		var base string
		tab := newTab(t, browser)
		t.Run("Before", func(t *testing.T) { // its server stops when it ends
			base, _ = startServe(t, serveOptions{bin: bin, noAuth: true, dataDir: dataDir})
			c := newClient(t, base, "")
			for i := range held {
				acquire(t, c, fmt.Sprintf("restart/%02d", i), "worker", time.Hour)
			}
			run(t, tab, chromedp.Navigate(base+"/ui/"))
			waitFor(t, tab, "the leases", fmt.Sprintf(`document.getElementById('count').dataset.n === '%d'`, held))
			waitFor(t, tab, "a rate", `document.getElementById('stat-rate').dataset.value !== undefined`)
			eval[bool](t, tab, `(() => {
				window.rates = [];
				const rate = document.getElementById('stat-rate');
				new MutationObserver(() => window.rates.push(Number(rate.dataset.value))).observe(rate, {childList: true, characterData: true, subtree: true, attributes: true});
				return true;
			})()`)
		})
		startServe(t, serveOptions{bin: bin, noAuth: true, dataDir: dataDir, addr: strings.TrimPrefix(base, "http://")})
		acquire(t, newClient(t, base, ""), "restart/after", "worker", time.Hour)
		waitFor(t, tab, "the lease acquired after the restart", fmt.Sprintf(`document.getElementById('count').dataset.n === '%d'`, held+1))
		waitFor(t, tab, "figures after the restart", `window.rates.length >= 5`)
		if rates := eval[[]float64](t, tab, `window.rates`); slices.Min(rates) < 0 {
			t.Errorf("acquisitions/s across a restart: %v; want none negative", rates)
		}
		waitFor(t, tab, "the active leases tile", fmt.Sprintf(`document.getElementById('stat-active').dataset.value === '%d'`, held+1))
	})

	// A stream's last event, end, says why the server ended it; the page
	// shows that reason. It looked for an event named error, which the
	// server no longer sends, and showed "the stream ended" whatever the
	// reason.
	t.Run("StreamEndShowsReason", func(t *testing.T) {
		tab := newTab(t, browser)
		t.Run("Serve", func(t *testing.T) { // its server shuts down, ending the stream, when it ends
			open, _ := startServe(t, serveOptions{bin: bin, noAuth: true})
			run(t, tab, chromedp.Navigate(open+"/ui/"))
			waitFor(t, tab, "the dashboard", `document.getElementById('conn').dataset.state === 'live'`)
			eval[bool](t, tab, `(() => {
				window.conns = [];
				const conn = document.getElementById('conn');
				new MutationObserver(() => window.conns.push(conn.textContent)).observe(conn, {childList: true, characterData: true, subtree: true});
				return true;
			})()`)
		})
		waitFor(t, tab, "the stream's end", `window.conns.length > 0`)
		waitFor(t, tab, "the server's reason", `window.conns.some(s => s.includes('shutting down'))`)
	})

	t.Run("LiveTable", func(t *testing.T) {
		a := acquire(t, admin, "demo/alpha", "worker-1", 2*time.Minute)
		b := acquire(t, admin, "demo/beta", "worker-2", 2*time.Minute)
		tab := newTab(t, browser)
		login(t, tab, base, "demo/", adminToken)

		// Leases appear with their owner and token.
		waitFor(t, tab, "both leases", fmt.Sprintf(`!!document.querySelector(%q) && !!document.querySelector(%q)`, rowSel("demo/alpha"), rowSel("demo/beta")))
		cells := eval[[]string](t, tab, fmt.Sprintf(`Array.from(document.querySelector(%q).children).map(c => c.textContent)`, rowSel("demo/alpha")))
		if len(cells) < 3 || cells[0] != "demo/alpha" || cells[1] != "worker-1" || cells[2] != fmt.Sprint(a.Token) {
			t.Errorf("row of demo/alpha: %q, want key, owner worker-1, token %d", cells, a.Token)
		}

		// The countdown runs: what is left falls, as the clock does.
		left1 := eval[int](t, tab, fmt.Sprintf(`Number(document.querySelector(%q).dataset.left)`, rowSel("demo/alpha")))
		if left1 <= 0 || left1 > 120000 {
			t.Errorf("demo/alpha has %d ms left, want within its 2 min", left1)
		}
		waitFor(t, tab, "the countdown to move", fmt.Sprintf(`Number(document.querySelector(%q)?.dataset.left) < %d - 250`, rowSel("demo/alpha"), left1))
		width := eval[string](t, tab, fmt.Sprintf(`document.querySelector(%q + ' .fill').style.width`, rowSel("demo/alpha")))
		if width == "" || width == "100%" || width == "0%" {
			t.Errorf("demo/alpha's bar is %q wide, want part of its TTL", width)
		}

		// A new lease appears without a reload.
		c := acquire(t, admin, "demo/gamma", "worker-3", time.Minute)
		waitFor(t, tab, "a lease acquired after the page loaded", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("demo/gamma")))

		// A release shows within a second, on the page's own clock.
		before := time.Now()
		if err := admin.Release(t.Context(), b); err != nil {
			t.Fatal(err)
		}
		relSel := `#events li[data-kind="released"][data-key="demo/beta"]`
		waitFor(t, tab, "the release in the timeline", fmt.Sprintf(`!!document.querySelector(%q) && !document.querySelector(%q)`, relSel, rowSel("demo/beta")))
		at := eval[int64](t, tab, fmt.Sprintf(`Number(document.querySelector(%q).dataset.at)`, relSel))
		if d := time.UnixMilli(at).Sub(before); d > time.Second {
			t.Errorf("the release showed %v after it was sent, want within 1 s", d)
		} else {
			t.Logf("release shown %v after it was sent", d)
		}

		// An expiry of a lease nobody renews shows within a second of its
		// expiry, highlighted.
		x := acquire(t, admin, "demo/stalled", "worker-dies", time.Second)
		waitFor(t, tab, "the short lease", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("demo/stalled")))
		expSel := `#events li[data-kind="expired"][data-key="demo/stalled"]`
		waitFor(t, tab, "the expiry in the timeline", fmt.Sprintf(`!!document.querySelector(%q) && !document.querySelector(%q)`, expSel, rowSel("demo/stalled")))
		at = eval[int64](t, tab, fmt.Sprintf(`Number(document.querySelector(%q).dataset.at)`, expSel))
		if d := time.UnixMilli(at).Sub(x.Expires); d > time.Second {
			t.Errorf("the expiry showed %v after the lease expired, want within 1 s", d)
		} else {
			t.Logf("expiry shown %v after the lease expired", d)
		}
		highlight := eval[string](t, tab, fmt.Sprintf(`getComputedStyle(document.querySelector(%q)).backgroundColor`, expSel))
		plain := eval[string](t, tab, fmt.Sprintf(`getComputedStyle(document.querySelector(%q)).backgroundColor`, relSel))
		if highlight == plain {
			t.Errorf("the expiry's background %s is the release's: not highlighted", highlight)
		}

		// The key's history: its tokens and holders.
		renewed, err := admin.Renew(t.Context(), c, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := admin.Release(t.Context(), renewed); err != nil {
			t.Fatal(err)
		}
		c2 := acquire(t, admin, "demo/gamma", "worker-4", time.Minute)
		waitFor(t, tab, "demo/gamma's new holder", fmt.Sprintf(`document.querySelector(%q + ' .c-owner')?.textContent === 'worker-4'`, rowSel("demo/gamma")))
		run(t, tab, chromedp.Click(chromedp.CSS(rowSel("demo/gamma"))))
		waitFor(t, tab, "demo/gamma's history", `document.querySelectorAll('#history li').length >= 3`)
		hist := eval[[]string](t, tab, `Array.from(document.querySelectorAll('#history li')).map(li => li.dataset.kind + ' ' + li.dataset.token)`)
		want := []string{fmt.Sprintf("acquired %d", c2.Token), fmt.Sprintf("released %d", c.Token), fmt.Sprintf("acquired %d", c.Token)}
		if strings.Join(hist, ",") != strings.Join(want, ",") {
			t.Errorf("demo/gamma's history: %q, want %q", hist, want)
		}

		// The server's figures, and the active leases the table lists.
		waitFor(t, tab, "the figures", `document.getElementById('stat-watchers').dataset.value >= 1 && `+
			`document.getElementById('stat-active').dataset.value === document.getElementById('count').dataset.n && `+
			`document.getElementById('stat-rate').dataset.value !== undefined`)

		// Markup in a key or owner stays text.
		const markup = `<img src=x onerror="window.pwned=1">`
		acquire(t, admin, "demo/<b>bold</b>", markup, time.Minute)
		waitFor(t, tab, "the lease with markup", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("demo/<b>bold</b>")))
		if got := eval[string](t, tab, fmt.Sprintf(`document.querySelector(%q + ' .c-owner').textContent`, rowSel("demo/<b>bold</b>"))); got != markup {
			t.Errorf("owner shown as %q, want the text %q", got, markup)
		}
		if eval[bool](t, tab, `window.pwned === 1 || !!document.querySelector('#rows img, #rows b, #events img, #events b')`) {
			t.Error("markup in an owner or key became elements of the page")
		}

		// No secret ID, and not the token, anywhere in the page.
		html := pageHTML(t, tab)
		for _, l := range []lease.Lease{a, b, c, renewed, c2, x} {
			if strings.Contains(html, l.ID.Reveal()) {
				t.Errorf("the page holds the secret ID of %s's lease %d", l.Key, l.Token)
			}
		}
		if strings.Contains(html, adminToken) {
			t.Error("the page holds the bearer token")
		}
		href := eval[string](t, tab, `location.href`)
		if strings.Contains(href, adminToken) {
			t.Errorf("the URL %s holds the bearer token", href)
		}
		screenshot(t, tab, "dashboard.png")
	})

	t.Run("ScopedCredential", func(t *testing.T) {
		jobs := newClient(t, base, jobsToken)
		acquire(t, jobs, "jobs/nightly", "cron", time.Minute)
		acquire(t, admin, "billing/ledger", "billing-writer", time.Minute)
		tab := newTab(t, browser)
		login(t, tab, base, "", jobsToken)
		waitFor(t, tab, "jobs/nightly", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("jobs/nightly")))
		// A lease acquired after the page loaded, under the credential's
		// prefix and outside it.
		acquire(t, admin, "jobs/hourly", "cron-2", time.Minute)
		acquire(t, admin, "billing/late", "billing-2", time.Minute)
		waitFor(t, tab, "jobs/hourly", fmt.Sprintf(`!!document.querySelector(%q)`, rowSel("jobs/hourly")))
		keys := eval[[]string](t, tab, `Array.from(document.querySelectorAll('#rows .row[data-key]')).map(r => r.dataset.key)`)
		for _, k := range keys {
			if !strings.HasPrefix(k, "jobs/") {
				t.Errorf("the jobs/ credential's page shows %s", k)
			}
		}
		for _, k := range []string{"demo/", "billing/", "secret/"} {
			if strings.Contains(pageHTML(t, tab), k) {
				t.Errorf("the jobs/ credential's page holds a key under %s", k)
			}
		}
		// Asked for a prefix it cannot list, it says so and shows nothing.
		run(t, tab, chromedp.Navigate(base+"/ui/#prefix=billing/"))
		waitFor(t, tab, "the refusal of billing/", `document.getElementById('notice').checkVisibility()`)
		n := eval[int](t, tab, `document.querySelectorAll('#rows .row[data-key]').length`)
		if n != 0 || strings.Contains(pageHTML(t, tab), "billing/ledger") {
			t.Errorf("the jobs/ credential's page under billing/ shows %d rows", n)
		}
	})

	// Overview is the picture of the README (docs/img/dashboard.png): a
	// handful of services' leases, a waiter, a release and an expiry.
	t.Run("Overview", func(t *testing.T) {
		type spec struct {
			key, owner string
			ttl        time.Duration
		}
		held := map[string]lease.Lease{}
		for _, sp := range []spec{
			{"svc/billing/ledger", "billing-7f9c", 45 * time.Second},
			{"svc/cron/nightly-backup", "cron@host-a", 2 * time.Minute},
			{"svc/cron/report", "cron@host-b", 90 * time.Second},
			{"svc/mail/outbox", "mailer-2", 30 * time.Second},
			{"svc/search/reindex", "indexer-1", 20 * time.Second},
			{"svc/search/shard-3", "indexer-3", 12 * time.Second},
			{"svc/payments/settle", "settler-a", 8 * time.Second},
			{"svc/leader", "node-1", 15 * time.Second},
		} {
			held[sp.key] = acquire(t, admin, sp.key, sp.owner, sp.ttl)
		}
		tab := newTab(t, browser)
		login(t, tab, base, "svc/", adminToken)
		waitFor(t, tab, "the services' leases", `document.getElementById('count').dataset.n === '8'`)

		// A waiter for svc/leader, through this server: its row counts it.
		waitCtx, stopWaiting := context.WithCancel(t.Context())
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			req, err := http.NewRequestWithContext(waitCtx, "POST", base+"/v1/leases/svc%2Fleader/acquire",
				strings.NewReader(`{"owner":"node-2","ttl_ms":15000,"wait_ms":30000}`))
			if err != nil {
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer "+adminToken)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		defer func() {
			stopWaiting()
			<-waited
		}()
		waitFor(t, tab, "svc/leader's waiter", fmt.Sprintf(`document.querySelector(%q + ' .c-wait')?.textContent === '1'`, rowSel("svc/leader")))

		l := held["svc/leader"]
		if _, err := admin.Renew(t.Context(), l, 15*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := admin.Release(t.Context(), held["svc/mail/outbox"]); err != nil {
			t.Fatal(err)
		}
		acquire(t, admin, "svc/mail/outbox", "mailer-5", 30*time.Second)
		acquire(t, admin, "svc/deploy/canary", "deployer", 700*time.Millisecond)
		waitFor(t, tab, "the canary's expiry", `!!document.querySelector('#events li[data-kind="expired"][data-key="svc/deploy/canary"]')`)
		run(t, tab, chromedp.Click(chromedp.CSS(rowSel("svc/mail/outbox"))))
		waitFor(t, tab, "svc/mail/outbox's history", `document.querySelectorAll('#history li').length === 3`)
		waitFor(t, tab, "acquisitions/s", `Number(document.getElementById('stat-rate').dataset.value) > 0`)
		screenshot(t, tab, "dashboard-overview.png")
	})

	t.Run("TenThousandLeases", func(t *testing.T) {
		const n = 10000
		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		bulk := make([]lease.Lease, n)
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < n; i += 16 {
					l, err := admin.Acquire(t.Context(), fmt.Sprintf("bulk/%05d", i), fmt.Sprintf("owner-%d", i%97), 10*time.Minute)
					if err != nil {
						errs <- err
						return
					}
					bulk[i] = l
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := errors.Join(func() (out []error) {
			for e := range errs {
				out = append(out, e)
			}
			return
		}()...); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d leases acquired in %v", n, time.Since(start))

		tab := newTab(t, browser)
		start = time.Now()
		login(t, tab, base, "bulk/", adminToken)
		waitFor(t, tab, "10,000 leases", fmt.Sprintf(`document.getElementById('count').dataset.n === '%d'`, n))
		t.Logf("page live with %d leases %v after opening it", n, time.Since(start))
		rows := eval[int](t, tab, `document.querySelectorAll('#rows .row').length`)
		if rows == 0 || rows > 100 {
			t.Errorf("%d rows in the DOM for %d leases, want a window of at most 100", rows, n)
		}
		// Scroll to the end and time, in the browser, until the last key
		// is drawn; then filter.
		ms := eval[float64](t, tab, `new Promise(resolve => {
			const v = document.getElementById('viewport'), t0 = performance.now();
			v.scrollTop = v.scrollHeight;
			const check = () => document.querySelector('#rows .row[data-key="bulk/09999"]') ? resolve(performance.now() - t0) : requestAnimationFrame(check);
			check();
		})`, chromedp.EvalAwaitPromise)
		t.Logf("scrolled to the last of %d leases in %.0f ms", n, ms)
		if ms > 2000 {
			t.Errorf("drawing the last key after a scroll took %.0f ms, want well under 2 s", ms)
		}
		rows = eval[int](t, tab, `document.querySelectorAll('#rows .row').length`)
		if rows == 0 || rows > 100 {
			t.Errorf("after the scroll: %d rows in the DOM, want a window of at most 100", rows)
		}
		run(t, tab, chromedp.SendKeys(chromedp.ID("filter"), "bulk/0999"))
		waitFor(t, tab, "the filter", `document.getElementById('count').textContent === '10 of 10000'`)
		shown := eval[[]string](t, tab, `Array.from(document.querySelectorAll('#rows .row')).filter(r => r.checkVisibility()).map(r => r.dataset.key)`)
		if len(shown) != 10 {
			t.Errorf("filtered to bulk/0999: rows shown %q, want bulk/09990 to bulk/09999", shown)
		}
		for i, k := range shown {
			if want := fmt.Sprintf("bulk/0999%d", i); k != want {
				t.Errorf("filtered row %d shows %s, want %s", i, k, want)
			}
		}
		screenshot(t, tab, "dashboard-10000.png")

		// 250 releases: the table follows, and the timeline keeps the
		// latest 200, newest first.
		for _, l := range bulk[:250] {
			if err := admin.Release(t.Context(), l); err != nil {
				t.Fatal(err)
			}
		}
		waitFor(t, tab, "the releases", fmt.Sprintf(`document.getElementById('count').dataset.n === '%d'`, n-250))
		events := eval[[]string](t, tab, `Array.from(document.querySelectorAll('#events li')).map(li => li.dataset.kind + ' ' + li.dataset.key)`)
		if len(events) != 200 || events[0] != "released bulk/00249" || events[199] != "released bulk/00050" {
			first, last := "", ""
			if len(events) > 0 {
				first, last = events[0], events[len(events)-1]
			}
			t.Errorf("timeline: %d entries from %q to %q; want 200 from released bulk/00249 to released bulk/00050", len(events), first, last)
		}
	})
}
