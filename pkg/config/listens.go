package config

import (
	"net"
	"strings"
)

// listens reports two of the addresses kretry run listens on that are the
// same: metrics.listen, admin.listen (when enabled) and embedded.listen
// (when kafka.brokers is [embedded]). The second would stop at start with
// "address already in use", which reads as another process's doing.
func (v *validator) listens(c *Config) {
	type listen struct{ key, addr string }
	var ls []listen
	if len(c.Kafka.Brokers) == 1 && c.Kafka.Brokers[0] == Embedded {
		ls = append(ls, listen{"embedded.listen", c.Embedded.Listen})
	}
	if c.Metrics.Listen != "" {
		ls = append(ls, listen{"metrics.listen", c.Metrics.Listen})
	}
	if c.Admin.Enabled {
		ls = append(ls, listen{"admin.listen", c.Admin.Listen})
	}
	for i, a := range ls {
		for _, b := range ls[:i] {
			if sameListen(a.addr, b.addr) {
				v.add(a.key, "%q is also %s: give each its own port", a.addr, b.key)
			}
		}
	}
}

// sameListen reports whether listening on a and on b (host:port) would
// collide: the same port, not 0, on the same host or where either takes
// every address.
func sameListen(a, b string) bool {
	ha, pa, erra := net.SplitHostPort(a)
	hb, pb, errb := net.SplitHostPort(b)
	if erra != nil || errb != nil || pa != pb || pa == "0" {
		return false
	}
	ha, hb = listenHost(ha), listenHost(hb)
	return ha == hb || ha == "" || hb == ""
}

// listenHost is host as sameListen compares it: "" for every address,
// localhost as its IPv4 loopback, an IP in its canonical form.
func listenHost(h string) string {
	h = strings.ToLower(h)
	if h == "localhost" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(h); ip != nil {
		if ip.IsUnspecified() {
			return ""
		}
		return ip.String()
	}
	return h
}
