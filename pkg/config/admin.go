package config

// Admin configures the DLQ admin API and web page (docs/DLQ.md, "Admin API
// and web page"), served by `kretry run` when enabled.
type Admin struct {
	// Enabled turns the admin endpoint on. Default false.
	Enabled bool `koanf:"enabled"`
	// Listen is its host:port. Default 127.0.0.1:9465 (loopback: reachable
	// from the pod or host only unless set otherwise).
	Listen string `koanf:"listen"`
	// Token is the bearer token every API call must carry
	// (Authorization: Bearer TOKEN), at least 16 characters; required when
	// Enabled. Set it from the environment (KRETRY_ADMIN__TOKEN) rather
	// than in the file.
	Token string `koanf:"token"`
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
		v.add("admin.token", "required when admin.enabled is true: a bearer token of at least %d characters (set KRETRY_ADMIN__TOKEN)", MinAdminToken)
	case len(a.Token) < MinAdminToken:
		v.add("admin.token", "has %d characters; use at least %d (a random token: openssl rand -hex 16)", len(a.Token), MinAdminToken)
	}
}
