package sidecar

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kretry/kretry/dlq"
	"github.com/kretry/kretry/pkg/config"
	"github.com/kretry/kretry/pkg/flow"
)

// startAdmin serves the DLQ admin API and page on admin.listen when
// admin.enabled (docs/DLQ.md); stop ends it and the operations it started.
func startAdmin(ctx context.Context, cfg *config.Config, opts []kgo.Opt, log *slog.Logger) (stop func(), err error) {
	if !cfg.Admin.Enabled {
		return func() {}, nil
	}
	if err := cfg.Admin.CheckToken(); err != nil {
		return nil, err
	}
	clients := map[string]*dlq.Client{}
	var names []string
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for _, t := range cfg.Topics {
		dt, err := dlq.TopicOf(cfg, t.Name)
		if err != nil {
			closeAll()
			return nil, err
		}
		c, err := dlq.New(dt, opts, dlq.WithLogger(log))
		if err != nil {
			closeAll()
			return nil, err
		}
		clients[t.Name] = c
		names = append(names, t.Name)
	}
	ln, err := listen("admin.listen", cfg.Admin.Listen)
	if err != nil {
		closeAll()
		return nil, err
	}
	actx, cancel := context.WithCancel(ctx)
	s := dlq.NewServer(actx, names, clients, cfg.Admin.Token, log, flow.Version)
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	log.Info("DLQ admin API and page listening", "addr", ln.Addr().String(), "topics", names)
	return func() {
		cancel() // running operations stop cleanly
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = srv.Shutdown(sctx)
		closeAll()
	}, nil
}
