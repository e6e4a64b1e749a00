package dlq

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Server is the admin API over the DLQs of one kretry process, and the web
// page that uses it (docs/DLQ.md, "Admin API"). Every /api/ call needs
// "Authorization: Bearer <token>"; a missing or wrong token is 401 and
// changes nothing. Mutating calls (redrive, discard, cancel) are logged
// with who (the "by" field or X-Kretry-By header, and the remote address),
// what (action, topic, filter) and how many (selected, moved).
type Server struct {
	ctx     context.Context
	clients map[string]*Client // by source topic
	names   []string
	token   []byte
	log     *slog.Logger
	version string

	mu  sync.Mutex
	ops []*opState
}

// opState is one redrive or discard started through the API.
type opState struct {
	Op       string    `json:"op"`
	Topic    string    `json:"topic"`
	Action   string    `json:"action"`
	By       string    `json:"by"`
	Started  time.Time `json:"started"`
	State    string    `json:"state"` // running, done, stopped, failed
	Progress Progress  `json:"progress"`
	Result   *Result   `json:"result,omitempty"`
	Error    string    `json:"error,omitempty"`
	cancel   context.CancelFunc
}

// NewServer serves clients (one per source topic, in names order) until
// ctx ends, which also stops the operations it started.
func NewServer(ctx context.Context, names []string, clients map[string]*Client, token string, log *slog.Logger, version string) *Server {
	return &Server{ctx: ctx, clients: clients, names: names, token: []byte(token), log: log, version: version}
}

// Handler returns the API and the page.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", servePage)
	api := http.NewServeMux()
	api.HandleFunc("GET /api/topics", s.topics)
	api.HandleFunc("GET /api/topics/{topic}/records", s.records)
	api.HandleFunc("GET /api/topics/{topic}/records/{partition}/{offset}", s.record)
	api.HandleFunc("GET /api/topics/{topic}/stats", s.stats)
	api.HandleFunc("POST /api/topics/{topic}/redrive", s.move(ActionRedrive))
	api.HandleFunc("POST /api/topics/{topic}/discard", s.move(ActionDiscard))
	api.HandleFunc("GET /api/ops", s.listOps)
	api.HandleFunc("GET /api/ops/{op}", s.getOp)
	api.HandleFunc("POST /api/ops/{op}/cancel", s.cancelOp)
	mux.Handle("/api/", s.auth(api))
	return mux
}

// auth checks the bearer token in constant time.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		// An empty token never authorises (kretry run refuses to start
		// with one; a Server built without one serves the page only).
		if !ok || len(s.token) == 0 || subtle.ConstantTimeCompare([]byte(got), s.token) != 1 {
			s.log.Warn("admin API: request refused: missing or wrong bearer token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="kretry"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token: send Authorization: Bearer <admin.token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // <admin.token> as written, not \u003c: the body is JSON, never HTML
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// client returns the client of the {topic} path value, or writes 404.
func (s *Server) client(w http.ResponseWriter, r *http.Request) *Client {
	c, ok := s.clients[r.PathValue("topic")]
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("topic %q is not a topics[].name of this kretry (known: %s)", r.PathValue("topic"), strings.Join(s.names, ", ")))
	}
	return c
}

func (s *Server) topics(w http.ResponseWriter, _ *http.Request) {
	out := []Topic{}
	for _, n := range s.names {
		out = append(out, s.clients[n].t)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) read(w http.ResponseWriter, r *http.Request) (*Snapshot, bool) {
	c := s.client(w, r)
	if c == nil {
		return nil, false
	}
	snap, err := c.Read(r.Context())
	if err != nil {
		code := http.StatusInternalServerError
		if errors.Is(err, ErrNotDLQ) {
			code = http.StatusConflict
		}
		writeError(w, code, err.Error())
		return nil, false
	}
	return snap, true
}

// records lists the records the query's filter selects (FilterSpec as
// query parameters), oldest first (newest=true: newest first), at most
// limit (default 1000).
func (s *Server) records(w http.ResponseWriter, r *http.Request) {
	spec, err := specFromQuery(r)
	if err != nil {
		s.badQuery(w, r, err.Error())
		return
	}
	f, err := spec.Filter()
	if err != nil {
		s.badQuery(w, r, err.Error())
		return
	}
	snap, ok := s.read(w, r)
	if !ok {
		return
	}
	limit := 1000
	if v := r.URL.Query().Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 {
			s.badQuery(w, r, fmt.Sprintf("limit %q: want a positive number of records", v))
			return
		}
	}
	out := []EntryJSON{}
	total := 0
	for i := range snap.Entries {
		e := snap.Entries[i]
		if r.URL.Query().Get("newest") == "true" {
			e = snap.Entries[len(snap.Entries)-1-i]
		}
		if f.Match(e) {
			total++
			if len(out) < limit {
				out = append(out, e.JSON(false))
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"total": total, "records": out})
}

func (s *Server) record(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("partition") + "/" + r.PathValue("offset")
	if err := ParseRecord(ref); err != nil {
		s.badQuery(w, r, err.Error())
		return
	}
	snap, ok := s.read(w, r)
	if !ok {
		return
	}
	if err := snap.CheckRecords(s.clients[r.PathValue("topic")].t.DLQ, []string{ref}); err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	for _, e := range snap.Entries {
		if e.Ref() == ref {
			writeJSON(w, http.StatusOK, e.JSON(true))
			return
		}
	}
	writeError(w, http.StatusNotFound, "no record "+ref+" in the DLQ")
}

// badQuery answers a read request 400 with msg and logs the refusal.
func (s *Server) badQuery(w http.ResponseWriter, r *http.Request, msg string) {
	s.log.Info("admin API: request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "status", http.StatusBadRequest, "error", msg)
	writeError(w, http.StatusBadRequest, msg)
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	if snap, ok := s.read(w, r); ok {
		writeJSON(w, http.StatusOK, StatsOf(snap.Entries))
	}
}
