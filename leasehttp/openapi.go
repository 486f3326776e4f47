package leasehttp

import (
	_ "embed"
	"net/http"
	"slices"
)

// openAPIDocument is openapi.json, the OpenAPI 3.1 document of the API. The
// package's tests check every request they send and every answer they get
// against it, so it cannot drift from the Server.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3.1 document of the v1 API, as the Server
// serves it at GET /v1/openapi.json: for generating clients and checking
// them against this server.
func OpenAPI() []byte { return slices.Clone(openAPIDocument) }

// handleOpenAPI serves the document. It needs no credentials and answers
// any Host, as /healthz does: it is the same public text for every caller
// and says nothing about any lease.
func (s *Server) handleOpenAPI(w *responseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
