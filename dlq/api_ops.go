package dlq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"
)

// MoveRequest is the body of POST /api/topics/{topic}/redrive and
// /discard.
type MoveRequest struct {
	Filter FilterSpec `json:"filter"`
	Limit  int        `json:"limit,omitempty"`
	// Rate is records/s, at least MinRate (0.01); 0 means DefaultRate.
	// The API has no unlimited rate.
	Rate   float64 `json:"rate,omitempty"`
	DryRun bool    `json:"dry_run,omitempty"`
	Reason string  `json:"reason,omitempty"` // required for a discard
	By     string  `json:"by,omitempty"`     // who, for the log and the marks
}

// maxBody bounds a request body (bytes).
const maxBody = 1 << 20

// move starts a redrive or discard: 200 with the result for a dry run;
// 202 with the operation once it holds the lease and selected its records;
// 409 when another operation holds the DLQ; 400 for a bad request.
func (s *Server) move(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c := s.client(w, r)
		if c == nil {
			return
		}
		body, code, err := decodeMove(w, r)
		by := requester(r, body.By)
		topic := r.PathValue("topic")
		if err != nil {
			s.refuse(w, code, err, "action", action, "topic", topic, "by", by)
			return
		}
		f, err := body.Filter.Filter()
		if err == nil && body.Rate < 0 {
			err = fmt.Errorf("rate %g: want records/s above 0, or 0 for the default (%d)", body.Rate, DefaultRate)
		}
		if err == nil {
			err = CheckRate(body.Rate) // the message names "rate", the field
		}
		if err != nil {
			s.refuse(w, http.StatusBadRequest, err, "action", action, "topic", topic, "by", by)
			return
		}
		req := Request{Action: action, Filter: f, Limit: body.Limit, Rate: body.Rate, DryRun: body.DryRun, Reason: body.Reason, By: by, Version: s.version}
		if action == ActionDiscard && strings.TrimSpace(body.Reason) == "" {
			s.refuse(w, http.StatusBadRequest, errors.New(`a discard needs a reason: set the JSON field "reason" to why the records are not delivered (kept in the marks for audit)`), opAttrs(topic, req)...)
			return
		}
		if req.DryRun {
			res, err := c.Move(r.Context(), req)
			if err != nil {
				s.refuse(w, moveCode(err), err, opAttrs(topic, req)...)
				return
			}
			entries := make([]EntryJSON, 0, len(res.Entries))
			for _, e := range res.Entries {
				entries = append(entries, e.JSON(false))
			}
			writeJSON(w, http.StatusOK, map[string]any{"result": res, "records": entries})
			return
		}
		st, err := s.start(c, topic, req)
		if err != nil {
			s.refuse(w, moveCode(err), err, opAttrs(topic, req)...)
			return
		}
		writeJSON(w, http.StatusAccepted, st.snapshot(s))
	}
}

// refuse answers a move request with code and err, and logs the refusal
// with its reason; attrs say what was asked, as far as it was read.
func (s *Server) refuse(w http.ResponseWriter, code int, err error, attrs ...any) {
	s.log.Info("admin API: operation refused", append(attrs, "status", code, "error", err.Error())...)
	writeError(w, code, err.Error())
}

// opAttrs are the log attributes of a move request: the rate is the
// effective one (records/s), and a discard carries its reason.
func opAttrs(topic string, req Request) []any {
	rate := req.Rate
	if rate == 0 {
		rate = DefaultRate
	}
	attrs := []any{"action", req.Action, "topic", topic, "by", req.By, "filter", req.Filter.String(), "limit", req.Limit, "rate", rate, "dry_run", req.DryRun}
	if req.Action == ActionDiscard {
		attrs = append(attrs, "reason", req.Reason)
	}
	return attrs
}

func moveCode(err error) int {
	switch {
	case errors.Is(err, ErrBusy), errors.Is(err, ErrMarksUnreadable), errors.Is(err, ErrMarksNotCompacted):
		return http.StatusConflict
	case errors.Is(err, ErrNotDLQ), errors.Is(err, errBadRequest), errors.Is(err, ErrNoRecord):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

// errBadRequest marks Move's argument errors.
var errBadRequest = errors.New("bad request")

// start runs req in the background and returns once it started (or failed
// to).
func (s *Server) start(c *Client, topic string, req Request) (*opState, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	st := &opState{Topic: topic, Action: req.Action, By: req.By, Started: time.Now(), State: "running", cancel: cancel}
	started := make(chan struct{})
	req.Started = func(res *Result) {
		s.log.Info("admin API: operation started", append([]any{"op", res.Op, "selected", res.Selected}, opAttrs(topic, req)...)...)
		s.mu.Lock()
		st.Op = res.Op
		st.Progress = Progress{Op: res.Op, Action: req.Action, Total: len(res.Entries)}
		s.ops = append(s.ops, st)
		s.mu.Unlock()
		close(started)
	}
	req.Progress = func(p Progress) {
		s.mu.Lock()
		st.Progress = p
		s.mu.Unlock()
	}
	failed := make(chan error, 1)
	go func() {
		defer cancel()
		res, err := c.Move(ctx, req)
		s.mu.Lock()
		st.Result = res
		switch {
		case err != nil:
			st.State, st.Error = "failed", err.Error()
		case res.Stopped:
			st.State = "stopped"
		default:
			st.State = "done"
		}
		s.mu.Unlock()
		if err != nil {
			failed <- err
		}
		if res != nil {
			attrs := []any{"op", res.Op, "action", req.Action, "topic", topic, "by", req.By,
				"moved", res.Moved, "selected", res.Selected, "refused", len(res.Refused), "state", st.State}
			if err != nil {
				attrs = append(attrs, "error", err.Error()) // no error="" on success
			}
			s.log.Info("admin API: operation ended", attrs...)
		}
	}()
	select {
	case <-started:
		return st, nil
	case err := <-failed:
		return nil, err
	}
}

// snapshot copies st under the lock.
func (st *opState) snapshot(s *Server) opState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := *st
	out.cancel = nil
	return out
}

func (s *Server) listOps(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	ops := slices.Clone(s.ops)
	s.mu.Unlock()
	out := make([]opState, 0, len(ops))
	for i := len(ops) - 1; i >= 0; i-- {
		out = append(out, ops[i].snapshot(s))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) find(w http.ResponseWriter, r *http.Request) *opState {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.ops {
		if st.Op == r.PathValue("op") {
			return st
		}
	}
	writeError(w, http.StatusNotFound, "no operation "+r.PathValue("op")+" started by this process (GET /api/ops lists them)")
	return nil
}

func (s *Server) getOp(w http.ResponseWriter, r *http.Request) {
	if st := s.find(w, r); st != nil {
		writeJSON(w, http.StatusOK, st.snapshot(s))
	}
}

// cancelOp stops a running operation cleanly: the batch in hand commits.
func (s *Server) cancelOp(w http.ResponseWriter, r *http.Request) {
	st := s.find(w, r)
	if st == nil {
		return
	}
	by := requester(r, "")
	if snap := st.snapshot(s); snap.State != "running" {
		writeJSON(w, http.StatusConflict, map[string]any{"error": "operation " + st.Op + " has already ended (" + snap.State + "); nothing to cancel", "op": snap})
		return
	}
	s.log.Info("admin API: operation cancelled", "op", st.Op, "by", by)
	st.cancel()
	writeJSON(w, http.StatusAccepted, st.snapshot(s))
}

// requester is who asked, for the marks and the log: the name the request
// gives (its JSON "by", else the X-Kretry-By header) and the client's host
// (not its port, which changes with every connection): "alice (admin API
// from 10.0.0.7)", or "admin API from 10.0.0.7" when it gives none.
func requester(r *http.Request, by string) string {
	if by == "" {
		by = r.Header.Get("X-Kretry-By")
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if by == "" {
		return "admin API from " + host
	}
	return by + " (admin API from " + host + ")"
}
