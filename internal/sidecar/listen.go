package sidecar

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/kretry/kretry/pkg/config"
)

// listen listens on addr, the value of the config key key (such as
// "metrics.listen"). An address in use, as when a second kretry runs on
// the same host, is an error that names the key, its environment variable
// and the way out.
func listen(key, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s %s: %w: another process listens there (a second kretry on this host?): give this one its own address with %s or %s=<host:port>",
			key, addr, err, key, config.EnvVar(key))
	}
	return nil, fmt.Errorf("%s %s: %w", key, addr, err)
}
