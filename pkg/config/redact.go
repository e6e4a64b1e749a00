package config

import (
	"fmt"
	"log/slog"
)

// redacted stands in for a password that is set.
const redacted = "<redacted>"

// String shows the SASL settings with the password redacted, so that
// printing a config (%v, %+v, or a field of a struct printed so) cannot
// leak it.
func (s SASL) String() string {
	return fmt.Sprintf("{mechanism:%s username:%s password:%s}", s.Mechanism, s.Username, s.redactedPassword())
}

// GoString is String for %#v.
func (s SASL) GoString() string {
	return fmt.Sprintf("config.SASL{Mechanism:%q, Username:%q, Password:%q}", s.Mechanism, s.Username, s.redactedPassword())
}

// LogValue is the SASL settings for log/slog, the password redacted.
func (s SASL) LogValue() slog.Value {
	return slog.GroupValue(slog.String("mechanism", s.Mechanism), slog.String("username", s.Username),
		slog.String("password", s.redactedPassword()))
}

func (s SASL) redactedPassword() string {
	if s.Password == "" {
		return ""
	}
	return redacted
}
