package e2e

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/kretry/kretry/pkg/delivery"
)

// answer is what the test app replies to one delivery.
type answer struct {
	status int
	body   string
}

// delivered is one request the test app received.
type delivered struct {
	msg    *delivery.Message
	status int
	at     time.Time
	from   string // the request's "from" query parameter: who delivered it, where the test says
}

// testApp is the application kretry delivers to: it decodes every request
// with delivery.MessageFromRequest, answers with decide and records both.
type testApp struct {
	srv    *httptest.Server
	decide func(*delivery.Message) answer

	mu    sync.Mutex
	got   []delivered
	acked map[string]int // ce-id → 2xx answers
	bad   []string       // requests that did not follow the wire contract
}

// startApp serves decide on a free loopback port.
func startApp(t *testing.T, decide func(*delivery.Message) answer) *testApp {
	t.Helper()
	a := newApp(decide)
	a.srv = httptest.NewServer(a)
	t.Cleanup(a.srv.Close)
	return a
}

// startAppOn serves decide on addr, retrying the bind for a moment in case
// the port is still in TIME_WAIT or briefly taken.
func startAppOn(t *testing.T, addr string, decide func(*delivery.Message) answer) *testApp {
	t.Helper()
	a := newApp(decide)
	var ln net.Listener
	waitFor(t, 5*time.Second, "binding the app to "+addr, func() bool {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err == nil
	})
	a.srv = httptest.NewUnstartedServer(a)
	a.srv.Listener.Close()
	a.srv.Listener = ln
	a.srv.Start()
	t.Cleanup(a.srv.Close)
	return a
}

func newApp(decide func(*delivery.Message) answer) *testApp {
	return &testApp{decide: decide, acked: map[string]int{}}
}

func (a *testApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m, err := delivery.MessageFromRequest(r)
	if err != nil {
		a.mu.Lock()
		a.bad = append(a.bad, err.Error())
		a.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	ans := a.decide(m)
	a.mu.Lock()
	a.got = append(a.got, delivered{msg: m, status: ans.status, at: time.Now(), from: r.URL.Query().Get("from")})
	if ans.status >= 200 && ans.status <= 299 {
		a.acked[m.ID]++
	}
	a.mu.Unlock()
	w.WriteHeader(ans.status)
	_, _ = w.Write([]byte(ans.body))
}

// deliveries returns a copy of what the app received so far, in order.
func (a *testApp) deliveries() []delivered {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]delivered(nil), a.got...)
}

// ackedAll reports whether every id was answered 2xx at least once.
func (a *testApp) ackedAll(ids []string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range ids {
		if a.acked[id] == 0 {
			return false
		}
	}
	return true
}

// malformed returns the errors of requests that broke the wire contract.
func (a *testApp) malformed() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.bad...)
}

// url is the app's address for app.url.
func (a *testApp) url() string { return a.srv.URL + "/kafka" }
