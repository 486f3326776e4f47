// Command fenced-service is a tiny key→value HTTP store whose writes are
// guarded by fencing tokens: the resource side of a lease. A worker holding a
// lease (for example under `lease run`) sends its token in the Fencing-Token
// header; a write whose token is older than the newest one the store has
// accepted for that key is answered 409 stale_token and changes nothing.
//
//	PUT /{key...}   store the body under key; needs Fencing-Token
//	GET /{key...}   read it back; the Fencing-Token response header names
//	                the token that wrote it
//
// Values live in memory and are lost on exit; see README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/leasehq/lease"
	"github.com/leasehq/lease/fence"
)

// maxValue bounds a stored value; a larger body is answered 413 and, being
// a failed write, does not advance the key's token.
const maxValue = 1 << 20

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		fmt.Fprintln(os.Stderr, "fenced-service:", err)
		os.Exit(1)
	}
}

// run serves until ctx is done, then shuts down gracefully. If ready is not
// nil it is called with the bound address once the server accepts
// connections, so tests can listen on port 0.
func run(ctx context.Context, args []string, logw io.Writer, ready func(net.Addr)) error {
	fs := flag.NewFlagSet("fenced-service", flag.ContinueOnError)
	fs.SetOutput(logw)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	strict := fs.Bool("strict", false, "admit each token once (Strict) instead of token >= highest (AtLeast)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	mode := fence.AtLeast
	if *strict {
		mode = fence.Strict
	}
	log := slog.New(slog.NewTextHandler(logw, nil))
	h, err := newHandler(fence.NewMemory(mode), log)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("fenced-service listening", "url", "http://"+ln.Addr().String(), "mode", mode.String())
	if ready != nil {
		ready(ln.Addr())
	}

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return err
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// store is the protected resource: values by key, each with the token that
// wrote it.
type store struct {
	mu   sync.RWMutex
	vals map[string]entry
}

type entry struct {
	value       []byte
	contentType string
	token       lease.Token
}

// newHandler returns the service's routes, with PUT fenced by guard.
func newHandler(guard fence.Guard, log *slog.Logger) (http.Handler, error) {
	s := &store{vals: make(map[string]entry)}
	fenced, err := fence.Middleware(guard, func(r *http.Request) (string, error) {
		// The guarded resource is the key itself: each key has its own
		// highest token, as each has its own lease.
		key := r.PathValue("key")
		return key, lease.ValidateKey(key)
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("PUT /{key...}", fenced(http.HandlerFunc(s.put)))
	mux.HandleFunc("GET /{key...}", s.get)
	return logRequests(log, mux), nil
}

// put runs inside the guard's check: nothing else writes key meanwhile.
func (s *store) put(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	token, _ := fence.TokenFromContext(r.Context())
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxValue))
	if err != nil {
		// A status >= 400 tells the guard nothing was written, so the
		// token is not recorded.
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody("invalid", fmt.Sprintf("value is larger than %d bytes", maxValue)))
			return
		}
		writeJSON(w, http.StatusBadRequest, errorBody("invalid", "reading body: "+err.Error()))
		return
	}
	s.mu.Lock()
	s.vals[key] = entry{value: body, contentType: r.Header.Get("Content-Type"), token: token}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "token": token, "bytes": len(body)})
}

func (s *store) get(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	s.mu.RLock()
	e, ok := s.vals[key]
	s.mu.RUnlock()
	if !ok {
		writeJSON(w, http.StatusNotFound, errorBody("not_found", fmt.Sprintf("no value for %q", key)))
		return
	}
	if e.contentType != "" {
		w.Header().Set("Content-Type", e.contentType)
	}
	w.Header().Set(fence.TokenHeader, fence.FormatToken(e.token))
	_, _ = w.Write(e.value)
}

func errorBody(code, msg string) map[string]any {
	return map[string]any{"error": map[string]string{"code": code, "message": msg}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// statusWriter remembers the status a handler answered with, for the log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// logRequests logs each request with its token and the answer, so a
// rejected late write is visible in the service's log.
func logRequests(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		log.Info("request", "method", r.Method, "path", r.URL.Path,
			"fencing_token", r.Header.Get(fence.TokenHeader), "status", sw.status)
	})
}
