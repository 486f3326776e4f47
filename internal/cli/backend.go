package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/boltstore"
	"github.com/leasehq/lease/etcdstore"
	"github.com/leasehq/lease/pgstore"
	"github.com/leasehq/lease/redisstore"
)

// BoltFile is the name of the embedded store's file inside --data-dir.
const BoltFile = "lease.db"

// openTimeout bounds connecting to an engine at start-up, so that a wrong
// address fails rather than hangs.
const openTimeout = 30 * time.Second

// openedBackend is a backend `lease serve` opened, with how to close it.
type openedBackend struct {
	lease.Backend
	desc  string // for the log, without secrets
	close func() error
	// storeID names the leases served, for leasehttp.WithStoreID: every
	// backend's StoreID, the same for every server of one store and
	// another for each other store.
	storeID string
}

// openBackend opens what `lease serve` serves: the bbolt store in
// cfg.DataDir when cfg.Backend is empty, otherwise the engine cfg.Backend
// names by its URL scheme. cfg.AllowVolatile runs a PostgreSQL or Redis
// backend whose persistence cannot keep tokens rising across a crash, which
// is otherwise refused; cfg.AcceptLogLoss and cfg.AllowSharedDataDir are
// the embedded store's.
func openBackend(ctx context.Context, cfg ServeConfig) (*openedBackend, error) {
	spec, allowVolatile := cfg.Backend, cfg.AllowVolatile
	if spec == "" {
		if allowVolatile {
			return nil, usageError(errors.New("--allow-volatile applies to a postgres:// or redis:// --backend only: the embedded store is always durable"))
		}
		return openBolt(cfg)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{{"--accept-log-loss", cfg.AcceptLogLoss}, {"--allow-shared-data-dir", cfg.AllowSharedDataDir}} {
		if f.set {
			return nil, usageError(fmt.Errorf("%s applies to the embedded store only, not to --backend", f.name))
		}
	}
	return openEngine(ctx, spec, allowVolatile, "serve")
}

// openEngine opens the engine spec names by its URL scheme, for the
// command verb (serve, bump), whose --allow-volatile allowVolatile is.
func openEngine(ctx context.Context, spec string, allowVolatile bool, verb string) (*openedBackend, error) {
	scheme, _, ok := strings.Cut(spec, "://")
	if !ok {
		return nil, usageError(fmt.Errorf("--backend %q is not a URL (postgres://…, redis://…, etcd://…)", redact(spec)))
	}
	if allowVolatile && scheme == "etcd" {
		return nil, usageError(errors.New("--allow-volatile applies to a postgres:// or redis:// --backend only: etcd is always durable"))
	}
	volatileHint := func(err error) error {
		if errors.Is(err, pgstore.ErrVolatile) || errors.Is(err, redisstore.ErrVolatile) {
			return fmt.Errorf("%w (lease %s --allow-volatile runs anyway)", err, verb)
		}
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	switch scheme {
	case "postgres", "postgresql":
		var opts []pgstore.Option
		if allowVolatile {
			opts = append(opts, pgstore.AllowVolatile())
		}
		s, err := pgstore.Open(ctx, spec, opts...)
		if err != nil {
			return nil, fmt.Errorf("%s: --backend %s: %w", verb, redact(spec), volatileHint(err))
		}
		return &openedBackend{Backend: s, desc: redact(spec), close: s.Close, storeID: s.StoreID()}, nil
	case "etcd":
		endpoints, prefix, err := parseEtcdSpec(spec)
		if err != nil {
			return nil, usageError(err)
		}
		var opts []etcdstore.Option
		if prefix != "" {
			opts = append(opts, etcdstore.WithPrefix(prefix))
		}
		s, err := etcdstore.Open(ctx, endpoints, opts...)
		if err != nil {
			return nil, fmt.Errorf("%s: --backend %s: %w", verb, redact(spec), err)
		}
		return &openedBackend{Backend: s, desc: redact(spec), close: s.Close, storeID: s.StoreID()}, nil
	case "redis", "rediss":
		var opts []redisstore.Option
		if allowVolatile {
			opts = append(opts, redisstore.AllowVolatile())
		}
		s, err := redisstore.Open(ctx, spec, opts...)
		if err != nil {
			return nil, fmt.Errorf("%s: --backend %s: %w", verb, redact(spec), volatileHint(err))
		}
		return &openedBackend{Backend: s, desc: redact(spec), close: s.Close, storeID: s.StoreID()}, nil
	default:
		return nil, usageError(fmt.Errorf("--backend: no backend for scheme %q in this build", scheme))
	}
}

// parseEtcdSpec splits etcd://host:port[,host:port…][/prefix] into client
// endpoints and a key prefix ("" for etcdstore's default). The prefix keeps
// its leading slash and gets a trailing one, as etcdstore wants.
func parseEtcdSpec(spec string) (endpoints []string, prefix string, err error) {
	rest, ok := strings.CutPrefix(spec, "etcd://")
	if !ok {
		return nil, "", fmt.Errorf("--backend %q: want etcd://host:port[,host:port…][/prefix]", redact(spec))
	}
	hosts, path, hasPath := strings.Cut(rest, "/")
	if strings.Contains(hosts, "@") {
		// Never echoed: it would show the password.
		return nil, "", fmt.Errorf("--backend %q: a user and password in etcd:// are not supported", redact(spec))
	}
	for _, h := range strings.Split(hosts, ",") {
		_, port, err := net.SplitHostPort(h)
		if err == nil {
			if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
				err = fmt.Errorf("port %q is not a number from 1 to 65535", port)
			}
		}
		if err != nil {
			return nil, "", fmt.Errorf("--backend %q: endpoint %q: %v", redact(spec), h, err)
		}
		endpoints = append(endpoints, "http://"+h)
	}
	if hasPath && path != "" {
		prefix = "/" + strings.TrimSuffix(path, "/") + "/"
	}
	return endpoints, prefix, nil
}

func openBolt(cfg ServeConfig) (*openedBackend, error) {
	dir := cfg.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("serve: --data-dir: %w", err)
	}
	path := filepath.Join(dir, BoltFile)
	var opts []boltstore.Option
	accepted := false
	if cfg.AcceptLogLoss {
		opts = append(opts, boltstore.AcceptLogLoss(func(loss *boltstore.CorruptError) {
			accepted = true
			// Loud, and once: the next start must not need the flag, and
			// whoever reads the log must learn what was given up.
			cfg.Logger.Error("--accept-log-loss: what could not be read or trusted is dropped; leases it granted are forgotten, and every key's next token is raised above any it could have issued",
				"file", loss.File, "log", loss.Log, "offset", loss.Offset, "damage", loss.Reason,
				"tokens_lost_per_key_at_most", loss.Lost, "token_floor", uint64(loss.Floor))
		}))
	}
	if cfg.AllowSharedDataDir {
		opts = append(opts, boltstore.AllowSharedDir())
	}
	s, err := boltstore.Open(path, opts...)
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if cfg.AcceptLogLoss && !accepted {
		cfg.Logger.Warn("--accept-log-loss: the log is not damaged, nothing was dropped; remove the flag, or a damaged log will be accepted without anyone deciding to", "log", path+"-wal")
	}
	return &openedBackend{Backend: s, desc: "bolt:" + path, close: s.Close, storeID: s.StoreID()}, nil
}

// secretSetting matches a password setting and its value, in a URL's query
// (postgres://db/x?password=…, sslpassword=…, which pgx reads) or in a
// keyword/value connection string (password='…').
var secretSetting = regexp.MustCompile(`(?i)([a-z_]*password\s*=\s*)('(?:[^'\\]|\\.)*'|[^&\s]*)`)

// redact drops the userinfo of a URL-like spec and the value of every
// password setting in it, so that passwords in connection strings stay out
// of logs and error messages.
func redact(spec string) string {
	if scheme, rest, ok := strings.Cut(spec, "://"); ok {
		if at := strings.LastIndex(strings.SplitN(rest, "/", 2)[0], "@"); at >= 0 {
			rest = "…@" + rest[at+1:]
		}
		spec = scheme + "://" + rest
	}
	return secretSetting.ReplaceAllString(spec, "${1}…")
}
