package config

import "fmt"

// Admin configures the DLQ admin API and web page (docs/DLQ.md, "Admin API
// and web page"), served by `kretry run` when enabled.
type Admin struct {
	// Enabled turns the admin endpoint on. Default false.
	Enabled bool `koanf:"enabled"`
	// Listen is its host:port. Default 127.0.0.1:9465 (loopback: reachable
	// from the pod or host only unless set otherwise).
	Listen string `koanf:"listen"`
	// Token is the bearer token every API call must carry
	// (Authorization: Bearer TOKEN), at least 16 characters; `kretry run`
	// refuses to start with Enabled and no token, and `kretry validate`
	// refuses such a config (CheckToken): the other commands do not need
	// it. Set it from the environment (KRETRY_ADMIN__TOKEN) rather than in
	// the file.
	Token string `koanf:"token"`
}

// CheckToken reports a missing admin.token when the admin endpoint is
// enabled; `kretry run` and `kretry validate` call it (Validate does not,
// so that `kretry dlq` works where the token is not set).
func (a *Admin) CheckToken() error {
	if a.Enabled && a.Token == "" {
		return fmt.Errorf("admin.token: required when admin.enabled is true: a bearer token of at least %d characters (set KRETRY_ADMIN__TOKEN)", MinAdminToken)
	}
	return nil
}

// DefaultAdminListen is admin.listen's default.
const DefaultAdminListen = "127.0.0.1:9465"

// MinAdminToken is the shortest admin.token accepted (characters).
const MinAdminToken = 16

func (v *validator) admin(a *Admin) {
	if !a.Enabled {
		return
	}
	v.hostPort("admin.listen", a.Listen, false)
	switch {
	case a.Token == "":
		// CheckToken, in kretry run and kretry validate.
	case len(a.Token) < MinAdminToken:
		v.add("admin.token", "has %d characters; use at least %d (a random token: openssl rand -hex 16)", len(a.Token), MinAdminToken)
	}
}
