package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/leasehq/lease/leasehttp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
)

// Defaults of `lease serve`.
const (
	DefaultAddr            = "127.0.0.1:7420"
	DefaultDataDir         = "./lease-data"
	DefaultShutdownTimeout = 10 * time.Second
)

func newServeCommand(a *app) *cobra.Command {
	cfg := ServeConfig{}
	cmd := &cobra.Command{
		Use:   "serve [--addr 127.0.0.1:7420] [--data-dir ./lease-data | --backend URL]",
		Short: "Run the lease server",
		Long: `serve runs the HTTP lease server (API in docs/SERVE.md).

By default leases live in a bbolt file under --data-dir, fsynced before any
token is handed out. --backend serves another engine instead:
  postgres://… or postgresql://…   PostgreSQL
  redis://host:port/db            Redis (must be durable: appendonly yes, appendfsync always)
PostgreSQL must run with fsync and full_page_writes on; --allow-volatile
serves a PostgreSQL or Redis that is not durable anyway (tests only: tokens
can go backwards after a crash).
  etcd://host:port[,host:port…][/prefix]   etcd

Clients authenticate with bearer tokens listed in --auth-tokens-file, one per
line: TOKEN PREFIX… (* for all keys). Without that file the server refuses any
address but loopback unless --insecure is given.

SIGTERM or SIGINT shuts it down gracefully: pending waits end, in-flight
requests finish (up to --shutdown-timeout), the backend is closed.`,
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
			s, err := NewServer(cfg)
			if err != nil {
				return err
			}
			if err := s.Run(ctx); err != nil {
				return err
			}
			var serveErr error
			select {
			case <-ctx.Done():
				// A second signal now ends the process at once, as the
				// default action would, should the drain take too long.
				stop()
				cfg.Logger.Info("shutting down", "reason", "signal")
			case serveErr = <-s.Err():
			}
			return errors.Join(serveErr, s.Close())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Addr, "addr", DefaultAddr, "address to listen on (host:port; port 0 picks a free one)")
	f.StringVar(&cfg.DataDir, "data-dir", DefaultDataDir, "directory of the embedded store (created 0700)")
	f.StringVar(&cfg.Backend, "backend", "", "serve another engine: postgres://…, redis://…, etcd://…")
	f.StringVar(&cfg.AuthTokensFile, "auth-tokens-file", "", "file of bearer tokens: one `TOKEN PREFIX…` per line")
	f.StringVar(&cfg.TLSCert, "tls-cert", "", "TLS certificate file (PEM), with --tls-key")
	f.StringVar(&cfg.TLSKey, "tls-key", "", "TLS private key file (PEM), with --tls-cert")
	f.BoolVar(&cfg.Insecure, "insecure", false, "allow a non-loopback --addr without --auth-tokens-file")
	f.BoolVar(&cfg.AllowVolatile, "allow-volatile", false, "serve a PostgreSQL or Redis --backend whose persistence cannot keep tokens rising across a crash (tests only)")
	f.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", DefaultShutdownTimeout, "how long a graceful shutdown waits for in-flight requests")
	f.BoolVar(&cfg.AcceptLogLoss, "accept-log-loss", false, "start on a damaged log of the embedded store: drop what cannot be read and raise every key's next token above any it could have issued (see docs/SERVE.md)")
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
	// AcceptLogLoss starts the embedded store on a damaged log, which is
	// otherwise refused (boltstore.AcceptLogLoss); the loss is logged.
	AcceptLogLoss bool
	// AllowSharedDataDir accepts a DataDir that other users may write to
	// (boltstore.AllowSharedDir).
	AllowSharedDataDir bool
	// Logger receives the server's structured logs; required.
	Logger *slog.Logger
}

// Server is a running `lease serve`: a listener, an HTTP server, the lease
// API handler and the backend it serves. Tests start it on port 0 with Run
// and stop it with Close.
type Server struct {
	cfg     ServeConfig
	tlsCert *tls.Certificate

	ln      net.Listener
	http    *http.Server
	api     *leasehttp.Server
	backend *openedBackend
	errc    chan error

	closeOnce sync.Once
	closeErr  error
}

// NewServer checks cfg and returns a Server that Run starts.
func NewServer(cfg ServeConfig) (*Server, error) {
	if cfg.Logger == nil {
		return nil, errors.New("serve: logger is nil")
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
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
	if cfg.ShutdownTimeout <= 0 {
		return nil, usageError(fmt.Errorf("--shutdown-timeout must be positive, got %v", cfg.ShutdownTimeout))
	}
	return &Server{cfg: cfg, errc: make(chan error, 1)}, nil
}

// Run loads credentials and certificates, opens the backend and starts
// serving in the background; it returns once the server is listening, or
// with the first thing that stopped it from getting there. Everything it
// checks is checked before the backend is opened or the port taken.
func (s *Server) Run(ctx context.Context) (err error) {
	log := s.cfg.Logger
	var creds []leasehttp.Credential
	if s.cfg.AuthTokensFile != "" {
		creds, err = leasehttp.LoadCredentials(s.cfg.AuthTokensFile)
		if err != nil {
			return fmt.Errorf("serve: --auth-tokens-file: %w", err)
		}
		if len(creds) == 0 {
			return fmt.Errorf("serve: --auth-tokens-file %s lists no credentials", s.cfg.AuthTokensFile)
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
		cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("serve: loading TLS key pair: %w", err)
		}
		s.tlsCert = &cert
	}

	s.backend, err = openBackend(ctx, s.cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = s.backend.close()
		}
	}()

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
	}
	if len(creds) > 0 {
		apiOpts = append(apiOpts, leasehttp.WithCredentials(creds))
	}
	s.api, err = leasehttp.NewServer(s.backend.Backend, apiOpts...)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}

	var lc net.ListenConfig
	s.ln, err = lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		_ = s.api.Close()
		return fmt.Errorf("serve: %w", err)
	}
	if s.tlsCert != nil {
		s.ln = tls.NewListener(s.ln, &tls.Config{Certificates: []tls.Certificate{*s.tlsCert}, MinVersion: tls.VersionTLS12})
	}
	s.http = &http.Server{
		Handler:           s.api,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	// Shutdown waits for in-flight requests; long-polls would keep it waiting
	// for up to their wait_ms, so it ends them first.
	s.http.RegisterOnShutdown(func() { _ = s.api.Close() })
	go func() {
		err := s.http.Serve(s.ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		s.errc <- err
	}()
	log.Info("listening", "addr", s.ln.Addr().String(), "tls", s.tlsCert != nil, "backend", s.backend.desc, "auth", len(creds) > 0)
	return nil
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
		s.closeErr = errors.Join(err, s.backend.close())
		s.cfg.Logger.Info("stopped")
	})
	return s.closeErr
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
