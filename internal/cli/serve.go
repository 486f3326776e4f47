package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/leasehttp"
	"github.com/leasehq/lease/leasehttp/ui"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

// Defaults of `lease serve`.
const (
	DefaultAddr              = "127.0.0.1:7420"
	DefaultDataDir           = "./lease-data"
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultWriteTimeout      = 30 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxConnections    = 4096
	DefaultWatchHeartbeat    = leasehttp.DefaultHeartbeat
	DefaultMaxWatchers       = leasehttp.DefaultMaxWatchers
	DefaultMaxWait           = leasehttp.DefaultMaxWait
	DefaultWaitGrace         = leasehttp.DefaultWaitGrace
)

// MaxHeaderBytes bounds a request's headers (http.Server.MaxHeaderBytes;
// net/http allows 4 KiB more): a request over it is answered 431. The API
// needs a few hundred bytes, and a browser's cookies fit; net/http's
// default, 1 MiB, let every connection trickling headers hold a MiB, so
// that --max-connections of them took gigabytes.
const MaxHeaderBytes = 64 << 10

func newServeCommand(a *app) *cobra.Command {
	cfg := ServeConfig{}
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:7420] [--data-dir ./lease-data | --backend URL]",
		Short: "Run the lease server",
		Long: `serve runs the HTTP lease server (API in docs/SERVE.md).

By default leases live in a bbolt file under --data-dir, fsynced before any
token is handed out. --backend serves another engine instead:
  postgres://… or postgresql://…          PostgreSQL
  redis://host:port/db                     Redis (must be durable: appendonly yes, appendfsync always)
  etcd://host:port[,host:port…][/prefix]   etcd
PostgreSQL must run with fsync and full_page_writes on; --allow-volatile
serves a PostgreSQL or Redis that is not durable anyway (tests only: tokens
can go backwards after a crash).

Clients authenticate with bearer tokens listed in --auth-tokens-file, one per
line: TOKEN PREFIX… (* for all keys). Without that file the server refuses any
address but loopback unless --insecure is given, and answers only requests
addressed (Host) to loopback, the --addr host or --allowed-hosts. A tokens
file that group or others may access, or a token shorter than 16 bytes, is
warned about.

Slow and idle clients are cut off by --read-header-timeout, --read-timeout,
--write-timeout and --idle-timeout; --max-connections bounds the connections
open at once and --max-connections-per-address those of one client address.
At a limit the connection waiting longest for its headers (over a second)
is closed first, then the one idle the longest.
Watch streams (GET /v1/watch) send a heartbeat after --watch-heartbeat of
silence, which also moves those timeouts on; --max-watchers bounds the
streams of one token.

SIGTERM or SIGINT shuts it down gracefully: pending waits end, in-flight
requests finish (up to --shutdown-timeout), the backend is closed.
SIGHUP reloads --auth-tokens-file and the --tls-cert/--tls-key pair, keeping
leases and connections; if any of them cannot be loaded, the server keeps
what it had and logs why.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("data-dir") && cfg.Backend != "" {
				return usageError(errors.New("--data-dir and --backend are mutually exclusive"))
			}
			if cfg.Backend != "" {
				cfg.DataDir = ""
			}
			cfg.Logger = slog.New(slog.NewTextHandler(a.stderr, nil))
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			// Caught from the start: SIGHUP's default action would end the
			// server, and a reload asked for while it starts is done once it runs.
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			s, err := NewServer(cfg)
			if err != nil {
				return err
			}
			if err := s.Run(ctx); err != nil {
				if ctx.Err() != nil {
					// SIGTERM or SIGINT while it started (an engine slow
					// to answer): the stop asked for, with nothing served
					// yet, not a failure to start.
					cfg.Logger.Info("stopped before serving", "reason", "signal", "err", err)
					return nil
				}
				return err
			}
			var serveErr error
			for running := true; running; {
				select {
				case <-hup:
					_ = s.Reload() // it logs what it did or why it could not
				case <-ctx.Done():
					// A second signal now ends the process at once, as the
					// default action would, should the drain take too long.
					stop()
					cfg.Logger.Info("shutting down", "reason", "signal")
					running = false
				case serveErr = <-s.Err():
					running = false
				}
			}
			return errors.Join(serveErr, s.Close())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", DefaultAddr, "address to listen on, `HOST:PORT` (port 0 picks a free one)")
	f.StringVar(&cfg.DataDir, "data-dir", DefaultDataDir, "keep the embedded store in `DIR`, relative to the working directory unless absolute (created 0700)")
	f.StringVar(&cfg.Backend, "backend", "", "serve another engine, by `URL`: postgres://…, redis://…, etcd://…")
	f.StringVar(&cfg.AuthTokensFile, "auth-tokens-file", "", "`FILE` of bearer tokens, one per line: TOKEN PREFIX…")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate `FILE` (PEM), with --tls-key")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "TLS private key `FILE` (PEM), with --tls-cert")
	f.BoolVar(&cfg.Insecure, "insecure", false, "allow a non-loopback --addr without --auth-tokens-file")
	f.BoolVar(&cfg.AllowVolatile, "allow-volatile", false, "serve a PostgreSQL or Redis --backend whose persistence cannot keep tokens rising across a crash (tests only)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "how long a graceful shutdown waits for in-flight requests")
	f.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", DefaultReadHeaderTimeout, "how long a client may take to send a request's headers")
	f.DurationVar(&cfg.ReadTimeout, "read-timeout", DefaultReadTimeout, "how long a client may take to send a request's headers and body")
	f.DurationVar(&cfg.WriteTimeout, "write-timeout", DefaultWriteTimeout, "how long answering a request may take, from its headers on (a waiting acquire gets its wait on top)")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", DefaultIdleTimeout, "how long a keep-alive connection may wait for its next request")
	f.IntVar(&cfg.MaxConnections, "max-connections", DefaultMaxConnections, "at most `N` connections open at once, in total (0: no limit); at the limit the one waiting longest for its headers, else the longest idle, is closed")
	f.IntVar(&cfg.MaxConnectionsPerAddress, "max-connections-per-address", 0, "at most `N` connections open at once from one client IP address (0: a quarter of --max-connections, at least 1; behind a proxy, set it to --max-connections)")
	f.DurationVar(&cfg.WatchHeartbeat, "watch-heartbeat", DefaultWatchHeartbeat, "how long a watch stream may stay silent before a heartbeat comment is sent")
	f.DurationVar(&cfg.MaxWait, "max-wait", DefaultMaxWait, "how long one waiting acquire request may wait before the client asks again (0: acquires never wait)")
	f.DurationVar(&cfg.WaitGrace, "wait-grace", DefaultWaitGrace, "how long a wait keeps its place in line between one request and the next (0: a re-sent wait joins the back)")
	f.IntVar(&cfg.MaxWatchers, "max-watchers", DefaultMaxWatchers, "at most `N` watch streams open at once per token (without --auth-tokens-file, in total)")
	f.StringSliceVar(&cfg.AllowedHosts, "allowed-hosts", nil, "without --auth-tokens-file, the `HOSTS` (names or addresses, comma-separated) answered besides loopback")
	f.BoolVar(&cfg.AcceptLogLoss, "accept-log-loss", false, "start the embedded store on damaged files (a damaged, cut or missing log; a lease.db damaged, missing or older than its log): drop what cannot be read or trusted and raise every key's next token above any it could have issued (see docs/SERVE.md)")
	f.BoolVar(&cfg.AllowSharedDataDir, "allow-shared-data-dir", false, "use a --data-dir that other users may write to, which is otherwise refused")
	return cmd
}

// ServeConfig is what `lease serve` is told, one field per flag.
type ServeConfig struct {
	// Addr is the host:port to listen on; port 0 picks a free one.
	Addr string
	// DataDir is the embedded store's directory; used when Backend is empty.
	DataDir string
	// Backend is the URL of another engine to serve: postgres://…,
	// redis://… or etcd://host:port[,host:port…][/prefix].
	Backend string
	// AuthTokensFile lists the accepted bearer tokens; empty means none.
	AuthTokensFile string
	// TLSCert and TLSKey are PEM files; both or neither.
	TLSCert, TLSKey string
	// Insecure allows a non-loopback Addr without credentials.
	Insecure bool
	// AllowVolatile serves a PostgreSQL or Redis Backend whose persistence
	// settings cannot keep tokens rising across a crash, which is otherwise
	// refused (pgstore.AllowVolatile, redisstore.AllowVolatile).
	AllowVolatile bool
	// ShutdownTimeout bounds how long Close waits for in-flight requests.
	ShutdownTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout are the
	// http.Server's; all must be positive.
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// MaxConnections bounds the connections open at once; 0 means no limit.
	MaxConnections int
	// MaxConnectionsPerAddress bounds the connections open at once from one
	// client IP address; 0 means a quarter of MaxConnections (at least 1),
	// and no limit when MaxConnections is 0, with which any other value is
	// refused.
	MaxConnectionsPerAddress int
	// WatchHeartbeat is leasehttp.WithHeartbeat's, within
	// [leasehttp.MinHeartbeat, leasehttp.MaxHeartbeat].
	WatchHeartbeat time.Duration
	// MaxWatchers is leasehttp.WithMaxWatchers's; at least 1.
	MaxWatchers int
	// MaxWait is leasehttp.WithMaxWait's, within [0, leasehttp.MaxMaxWait].
	MaxWait time.Duration
	// WaitGrace is leasehttp.WithWaitGrace's, within [0, leasehttp.MaxWaitGrace].
	WaitGrace time.Duration
	// AllowedHosts are Host names or addresses, besides loopback and the
	// host of Addr, that a server without credentials answers.
	AllowedHosts []string
	// AcceptLogLoss starts the embedded store on a damaged log, which is
	// otherwise refused (boltstore.AcceptLogLoss); the loss is logged.
	AcceptLogLoss bool
	// AllowSharedDataDir accepts a DataDir that other users may write to
	// (boltstore.AllowSharedDir).
	AllowSharedDataDir bool
	// Logger receives the server's structured logs; required.
	Logger *slog.Logger
}

// DefaultServeConfig is the configuration `lease serve` runs with when
// given no flags, on 127.0.0.1:0 (a free port) with dataDir as the embedded
// store's directory and logs to logger: what a test or a benchmark starts
// before it changes the fields it is about.
func DefaultServeConfig(dataDir string, logger *slog.Logger) ServeConfig {
	return ServeConfig{
		Addr:              "127.0.0.1:0",
		DataDir:           dataDir,
		ShutdownTimeout:   DefaultShutdownTimeout,
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		ReadTimeout:       DefaultReadTimeout,
		WriteTimeout:      DefaultWriteTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxConnections:    DefaultMaxConnections,
		WatchHeartbeat:    DefaultWatchHeartbeat,
		MaxWatchers:       DefaultMaxWatchers,
		MaxWait:           DefaultMaxWait,
		WaitGrace:         DefaultWaitGrace,
		Logger:            logger,
	}
}

// Server is a running `lease serve`: a listener, an HTTP server, the lease
// API handler and the backend it serves. Tests start it on port 0 with Run
// and stop it with Close.
type Server struct {
	cfg ServeConfig
	// tlsCert is the certificate new TLS handshakes get; Reload swaps it,
	// and connections already open keep theirs. nil without TLS.
	tlsCert atomic.Pointer[tls.Certificate]
	// reloading lets one Reload run at a time, so that the credentials and
	// the certificate in use always come from the same reload.
	reloading sync.Mutex

	ln      net.Listener
	http    *http.Server
	api     *leasehttp.Server
	backend *openedBackend
	backups *backupSocket // the embedded store's backup socket; nil otherwise
	errc    chan error

	closeOnce sync.Once
	closeErr  error
}

// NewServer checks cfg and returns a Server that Run starts.
func NewServer(cfg ServeConfig) (*Server, error) {
	if cfg.Logger == nil {
		return nil, errors.New("serve: logger is nil")
	}
	_, port, err := net.SplitHostPort(cfg.Addr)
	if err == nil {
		// A port out of range was otherwise found out only by the
		// listen, and reported as a failure to start (exit 1).
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return nil, usageError(fmt.Errorf("--addr %q: %v", cfg.Addr, err))
	}
	if cfg.Backend == "" && cfg.DataDir == "" {
		return nil, usageError(errors.New("one of --data-dir and --backend is needed"))
	}
	if cfg.Backend != "" && cfg.DataDir != "" {
		return nil, usageError(errors.New("--data-dir and --backend are mutually exclusive"))
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, usageError(errors.New("--tls-cert and --tls-key go together"))
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
	}{{"shutdown-timeout", cfg.ShutdownTimeout}, {"read-header-timeout", cfg.ReadHeaderTimeout}, {"read-timeout", cfg.ReadTimeout}, {"write-timeout", cfg.WriteTimeout}, {"idle-timeout", cfg.IdleTimeout}} {
		if d.d <= 0 {
			return nil, usageError(fmt.Errorf("--%s must be positive, got %v", d.flag, d.d))
		}
	}
	if cfg.MaxConnections < 0 {
		return nil, usageError(fmt.Errorf("--max-connections must be 0 (no limit) or more, got %d", cfg.MaxConnections))
	}
	if cfg.MaxConnectionsPerAddress < 0 {
		return nil, usageError(fmt.Errorf("--max-connections-per-address must be 0 (a quarter of --max-connections) or more, got %d", cfg.MaxConnectionsPerAddress))
	}
	if cfg.MaxConnectionsPerAddress > 0 && cfg.MaxConnections == 0 {
		// The limit per address is kept by the listener that keeps the
		// total: without one, it would be ignored without a word.
		return nil, usageError(fmt.Errorf("--max-connections-per-address %d needs --max-connections: with --max-connections 0 no connection limit applies", cfg.MaxConnectionsPerAddress))
	}
	if cfg.WatchHeartbeat < leasehttp.MinHeartbeat || cfg.WatchHeartbeat > leasehttp.MaxHeartbeat {
		return nil, usageError(fmt.Errorf("--watch-heartbeat must be within [%v, %v], got %v", leasehttp.MinHeartbeat, leasehttp.MaxHeartbeat, cfg.WatchHeartbeat))
	}
	if cfg.MaxWait < 0 || cfg.MaxWait > leasehttp.MaxMaxWait {
		return nil, usageError(fmt.Errorf("--max-wait must be within [0, %v], got %v", leasehttp.MaxMaxWait, cfg.MaxWait))
	}
	if cfg.WaitGrace < 0 || cfg.WaitGrace > leasehttp.MaxWaitGrace {
		return nil, usageError(fmt.Errorf("--wait-grace must be within [0, %v], got %v", leasehttp.MaxWaitGrace, cfg.WaitGrace))
	}
	if cfg.MaxWatchers < 1 {
		return nil, usageError(fmt.Errorf("--max-watchers must be at least 1, got %d", cfg.MaxWatchers))
	}
	if len(cfg.AllowedHosts) > 0 && cfg.AuthTokensFile != "" {
		return nil, usageError(errors.New("--allowed-hosts applies only without --auth-tokens-file: a bearer token already keeps web pages out"))
	}
	if err := leasehttp.ValidateAllowedHosts(cfg.AllowedHosts); err != nil {
		return nil, usageError(fmt.Errorf("--allowed-hosts: %w", err))
	}
	return &Server{cfg: cfg, errc: make(chan error, 1)}, nil
}

// Run loads credentials and certificates, opens the backend and starts
// serving in the background; it returns once the server is listening, or
// with the first thing that stopped it from getting there. Everything it
// checks is checked before the port is taken, and the port is taken before
// the backend is opened: a server that cannot listen creates no store.
func (s *Server) Run(ctx context.Context) (err error) {
	log := s.cfg.Logger
	var creds []leasehttp.Credential
	if s.cfg.AuthTokensFile != "" {
		if creds, err = s.loadCredentials(); err != nil {
			return err
		}
	}
	loopback := isLoopback(s.cfg.Addr)
	if len(creds) == 0 {
		if !loopback && !s.cfg.Insecure {
			return fmt.Errorf("serve: refusing to listen on %s without --auth-tokens-file: anyone who can reach it could take any lease (--insecure allows it)", s.cfg.Addr)
		}
		log.Warn("no credentials configured: every client that can reach the server may take and release any lease", "addr", s.cfg.Addr)
	} else if !loopback && s.cfg.TLSCert == "" {
		log.Warn("bearer tokens will cross the network in clear text: consider --tls-cert and --tls-key", "addr", s.cfg.Addr)
	}
	if s.cfg.TLSCert != "" {
		cert, err := s.loadCert()
		if err != nil {
			return err
		}
		s.tlsCert.Store(cert)
	}

	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	defer func() {
		if err != nil {
			_ = ln.Close()
		}
	}()

	s.backend, err = openBackend(ctx, s.cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = s.backend.close()
		}
	}()
	if store, ok := s.backend.Backend.(*boltstore.Store); ok {
		s.backups, err = serveBackups(store, s.cfg.DataDir, log)
		switch {
		case errors.Is(err, errSocketPath):
			log.Warn("lease backup can copy this store only while it is not served", "why", err, "socket", filepath.Join(s.cfg.DataDir, BackupSocket))
			err = nil
		case err != nil:
			return err
		default:
			defer func() {
				if err != nil {
					_ = s.backups.Close()
				}
			}()
		}
	}

	reg := prometheus.NewRegistry()
	if err := errors.Join(
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	); err != nil {
		return fmt.Errorf("serve: registering runtime metrics: %w", err)
	}
	apiOpts := []leasehttp.ServerOption{
		leasehttp.WithLogger(log),
		leasehttp.WithRegisterer(reg),
		leasehttp.WithGatherer(reg),
		leasehttp.WithHeartbeat(s.cfg.WatchHeartbeat),
		leasehttp.WithMaxWatchers(s.cfg.MaxWatchers),
		leasehttp.WithMaxWait(s.cfg.MaxWait),
		leasehttp.WithWaitGrace(s.cfg.WaitGrace),
	}
	if s.backend.storeID != "" {
		apiOpts = append(apiOpts, leasehttp.WithStoreID(s.backend.storeID))
	}
	if len(creds) > 0 {
		apiOpts = append(apiOpts, leasehttp.WithCredentials(creds))
	} else {
		apiOpts = append(apiOpts, leasehttp.WithAllowedHosts(append(addrHost(s.cfg.Addr), s.cfg.AllowedHosts...)))
	}
	s.api, err = leasehttp.NewServer(s.backend.Backend, apiOpts...)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}

	s.ln = ln
	var limit *limitListener
	if s.cfg.MaxConnections > 0 {
		limit = newLimitListener(s.ln, s.cfg.MaxConnections, perAddressLimit(s.cfg))
		s.ln = limit
	}
	if s.tlsCert.Load() != nil {
		s.ln = tls.NewListener(s.ln, &tls.Config{
			// Read at each handshake, so that a reload reaches new
			// connections without closing the open ones.
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.tlsCert.Load(), nil },
			MinVersion:     tls.VersionTLS12,
		})
	}
	s.http = &http.Server{
		Handler:           withDashboard(s.api),
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if limit != nil {
		s.http.ConnState = limit.connState
	}
	// Shutdown waits for in-flight requests; long-polls would keep it waiting
	// for up to their wait_ms, and watch streams for good, so it ends them
	// first.
	s.http.RegisterOnShutdown(func() { _ = s.api.Close() })
	go func() {
		err := s.http.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.errc <- err
	}()
	attrs := []any{"addr", s.ln.Addr().String(), "tls", s.tlsCert.Load() != nil, "backend", s.backend.desc, "auth", len(creds) > 0}
	if s.backend.storeID != "" {
		attrs = append(attrs, "store", s.backend.storeID)
	}
	log.Info("listening", attrs...)
	return nil
}

// Reload reads --auth-tokens-file and the --tls-cert/--tls-key pair again
// and puts them in use, as SIGHUP does. Leases and open connections are
// kept: requests in flight finish with the credentials they started with,
// and open TLS connections keep their certificate while new handshakes get
// the new one. It changes everything or nothing: if a file is missing,
// unparsable or empty, or the key pair does not load, the server keeps the
// credentials and certificate it has, and Reload logs and returns why. With
// neither a tokens file nor TLS it logs that there is nothing to reload.
// Call it only after Run has returned nil.
func (s *Server) Reload() error {
	s.reloading.Lock()
	defer s.reloading.Unlock()
	log := s.cfg.Logger
	if s.api == nil {
		return errors.New("serve: reload: the server is not running")
	}
	if s.cfg.AuthTokensFile == "" && s.cfg.TLSCert == "" {
		log.Info("reload: nothing to reload: no --auth-tokens-file, no --tls-cert")
		return nil
	}
	var (
		creds []leasehttp.Credential
		cert  *tls.Certificate
		err   error
	)
	if s.cfg.AuthTokensFile != "" {
		creds, err = s.loadCredentials()
	}
	if err == nil && s.cfg.TLSCert != "" {
		cert, err = s.loadCert()
	}
	if err == nil && creds != nil {
		err = s.api.SetCredentials(creds)
	}
	if err != nil {
		log.Error("reload failed; still serving with the credentials and certificate loaded before", "err", err)
		return fmt.Errorf("serve: reload: %w", err)
	}
	if cert != nil {
		s.tlsCert.Store(cert)
	}
	attrs := []any{"credentials", len(creds), "tls", cert != nil}
	if cert != nil && cert.Leaf != nil { // LoadX509KeyPair parses the leaf
		attrs = append(attrs, "cert_not_after", cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	log.Info("reloaded", attrs...)
	return nil
}

// loadCredentials reads --auth-tokens-file and logs what is weak about it.
func (s *Server) loadCredentials() ([]leasehttp.Credential, error) {
	f, err := leasehttp.ReadCredentialsFile(s.cfg.AuthTokensFile)
	if err != nil {
		return nil, fmt.Errorf("serve: --auth-tokens-file: %w", err)
	}
	for _, w := range f.Warnings {
		s.cfg.Logger.Warn(w, "file", s.cfg.AuthTokensFile)
	}
	return f.Credentials, nil
}

// loadCert reads the --tls-cert/--tls-key pair.
func (s *Server) loadCert() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("serve: loading TLS key pair: %w", err)
	}
	return &cert, nil
}

// Addr returns the address the server listens on, with the port it got.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Err delivers the error that stopped the server by itself (nil after
// Close).
func (s *Server) Err() <-chan error { return s.errc }

// Close shuts the server down gracefully: it stops accepting, ends pending
// long-polls, waits up to ShutdownTimeout for in-flight requests, and closes
// the backend. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.http == nil {
			return // never ran
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancel()
		err := s.http.Shutdown(ctx)
		if err != nil {
			s.cfg.Logger.Warn("in-flight requests did not finish in time; closing them", "timeout", s.cfg.ShutdownTimeout)
			err = errors.Join(err, s.http.Close())
		}
		if s.backups != nil {
			err = errors.Join(err, s.backups.Close())
		}
		s.closeErr = errors.Join(err, s.backend.close())
		s.cfg.Logger.Info("stopped")
	})
	return s.closeErr
}

// perAddressLimit is cfg's limit of connections per client address: its
// MaxConnectionsPerAddress, or a quarter of MaxConnections (at least 1) when
// that is 0.
func perAddressLimit(cfg ServeConfig) int {
	if n := cfg.MaxConnectionsPerAddress; n > 0 {
		return n
	}
	return max(cfg.MaxConnections/4, 1)
}

// addrHost is the host of addr as a one-element list, or none when addr
// listens on every interface: clients that dial it by that name or address
// are not misdirected.
func addrHost(addr string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return nil
	}
	return []string{host}
}

// isLoopback reports whether addr's host can only be reached from this
// machine. An empty host means every interface, so it is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withDashboard serves the dashboard (package ui) under /ui, leads a
// browser opening the server's root there, and serves everything else by
// api. It routes on the path's prefix alone: a ServeMux in front would
// clean and redirect paths that api answers itself (an empty key).
func withDashboard(api http.Handler) http.Handler {
	dash := ui.Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		switch {
		case p == "/ui" || strings.HasPrefix(p, ui.Prefix):
			dash.ServeHTTP(w, r)
			return
		case p == "/" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
			// 302, not 301: a browser would remember a permanent one.
			http.Redirect(w, r, ui.Prefix, http.StatusFound)
			return
		}
		api.ServeHTTP(w, r)
	})
}
