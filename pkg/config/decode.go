package config

// Decoding the merged keys into Config: the decode hooks, and the errors
// of mapstructure turned into FieldErrors that name the key, the value and
// what to write instead (unknown keys: unknown.go).

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

var durationType = reflect.TypeOf(time.Duration(0))

// rootName is what mapstructure calls the top level of the config in an
// error since v2.5.0: "config.Config".
var rootName = reflect.TypeOf(Config{}).String()

// valueError is a decode hook failure; decodeErrors adds the path.
type valueError struct {
	value string
	msg   string
}

func (e *valueError) Error() string { return fmt.Sprintf("%q %s", e.value, e.msg) }

// stringToSliceHook splits a string on commas where a list is expected,
// trimming spaces around each element; "" is the empty list. This is how
// KRETRY_KAFKA__BROKERS=a:9092,b:9092 becomes a list. (mapstructure's
// StringToSliceHookFunc only targets []string and keeps the spaces.)
func stringToSliceHook(from, to reflect.Type, data any) (any, error) {
	if from.Kind() != reflect.String || to.Kind() != reflect.Slice || to.Elem().Kind() == reflect.Uint8 {
		return data, nil
	}
	s := strings.TrimSpace(reflect.ValueOf(data).String())
	if s == "" {
		return []string{}, nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts, nil
}

// stringToDurationHook parses time.ParseDuration strings ("1m", "250ms")
// and rejects bare numbers, which mapstructure would take as nanoseconds,
// except 0, which needs no unit (the docs write `max_age: 0`, and
// time.ParseDuration takes "0" from the environment too). It replaces
// mapstructure's StringToTimeDurationHookFunc, whose error drops the bad
// value.
func stringToDurationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	switch from.Kind() {
	case reflect.String:
		s := reflect.ValueOf(data).String()
		d, err := time.ParseDuration(s)
		if err != nil {
			msg := `is not a duration: use a Go duration such as "10s", "1m30s" or "250ms"`
			if h, ok := DaysInHours(s); ok {
				msg = fmt.Sprintf(`is not a duration: a Go duration has no day unit, write %q`, h)
			}
			return nil, &valueError{value: s, msg: msg}
		}
		return d, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		if from == durationType {
			return data, nil
		}
		if reflect.ValueOf(data).IsZero() {
			return time.Duration(0), nil
		}
		return nil, &valueError{value: fmt.Sprint(data), msg: `is not a duration: it needs a unit, as in "10s" or "250ms"`}
	}
	return data, nil
}

// DaysInHours turns a count of days or weeks ("7d", "2w", "1.1d") into
// the Go duration a user meant ("168h", "336h", "26h24m"), for an error's
// advice (the config's durations here, the command line's flags in
// cmd/kretry): none for a count that is not positive or whose duration is past
// time.Duration's range (about 106,751 days).
func DaysInHours(s string) (string, bool) {
	per := map[string]time.Duration{"d": 24 * time.Hour, "w": 7 * 24 * time.Hour}
	for unit, each := range per {
		n, ok := strings.CutSuffix(strings.TrimSpace(s), unit)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(n, 64)
		if err != nil || !(f > 0) || f*float64(each) >= math.MaxInt64 {
			return "", false
		}
		d := time.Duration(math.Round(f * float64(each))).Round(time.Millisecond)
		if d <= 0 {
			return "", false
		}
		h := d.String() // "168h0m0s", "26h24m0s", "2h24m0.5s"
		if strings.HasSuffix(h, "m0s") {
			h = strings.TrimSuffix(h, "0s") // "168h0m", "26h24m"
		}
		if strings.HasSuffix(h, "h0m") {
			h = strings.TrimSuffix(h, "0m") // "168h"
		}
		return h, true
	}
	return "", false
}

// numberToIntHook rejects fractions and out-of-range numbers where an
// integer is expected (mapstructure truncates 8.5 to 8 and wraps around).
func numberToIntHook(from, to reflect.Type, data any) (any, error) {
	if to == durationType {
		return data, nil
	}
	switch to.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
	default:
		return data, nil
	}
	v := reflect.ValueOf(data)
	switch from.Kind() {
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if f != math.Trunc(f) || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is not an integer"}
		}
		if f < math.MinInt64 || f >= math.MaxInt64 || reflect.Zero(to).OverflowInt(int64(f)) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is out of range"}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if reflect.Zero(to).OverflowInt(v.Int()) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is out of range"}
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		if u := v.Uint(); u > math.MaxInt64 || reflect.Zero(to).OverflowInt(int64(u)) {
			return nil, &valueError{value: fmt.Sprint(data), msg: "is out of range"}
		}
	}
	return data, nil
}

// decodeErrors rewrites mapstructure's error tree into one *FieldError per
// problem, in decode order: "app.urll: unknown key",
// `topics[0].retry.tiers[1]: "5x" is not a duration`.
func decodeErrors(err error, raw map[string]any, envs envPaths) []error {
	var out []error
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case *mapstructure.DecodeError:
			inner := e.Unwrap()
			if _, ok := inner.(interface{ Unwrap() []error }); ok {
				walk(inner)
				return
			}
			if _, ok := inner.(*mapstructure.DecodeError); ok {
				walk(inner)
				return
			}
			out = append(out, fieldErrors(e.Name(), inner, raw, envs)...)
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		default:
			if u := errors.Unwrap(err); u != nil {
				walk(u)
				return
			}
			out = append(out, err)
		}
	}
	walk(err)
	return out
}

// fieldErrors are the *FieldErrors of inner, a decode failure (not a tree
// of them) at the field mapstructure names name: one per unknown key, or
// one for the field.
func fieldErrors(name string, inner error, raw map[string]any, envs envPaths) []error {
	if name == rootName {
		// mapstructure v2.5.0 names the root by its type in
		// "has invalid keys" (v2.4.0 left it empty).
		name = ""
	}
	if strings.HasPrefix(inner.Error(), "has invalid keys: ") {
		return unknownKeyErrors(raw, name, inner.Error(), envs)
	}
	return []error{envs.fieldError(name, decodeMsg(raw, name, inner))}
}

// decodeMsg is what a *FieldError says of inner, the failure to decode
// the field at name: the expected and the found type or value.
func decodeMsg(raw map[string]any, name string, inner error) string {
	var (
		ve *valueError
		pe *mapstructure.ParseError
		ue *mapstructure.UnconvertibleTypeError
	)
	switch {
	case strings.HasPrefix(inner.Error(), "expected a map or struct, got "):
		got := "a " + strings.Trim(strings.TrimPrefix(inner.Error(), "expected a map or struct, got "), `"`)
		if v, ok := rawAt(raw, name); ok {
			got = valueNoun(v)
		}
		return "expected a mapping, got " + got
	case errors.As(inner, &ve):
		return ve.Error()
	case errors.As(inner, &pe):
		msg := "is not " + typeNoun(pe.Expected.Type())
		if errors.Is(pe.Err, strconv.ErrRange) {
			msg = "is out of range"
		}
		return fmt.Sprintf("%q %s", fmt.Sprint(pe.Value), msg)
	case errors.As(inner, &ue):
		return fmt.Sprintf("expected %s, got %s", typeNoun(ue.Expected.Type()), valueNoun(ue.Value))
	}
	return inner.Error()
}

func joinPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// rawAt returns the raw value at a decode path, if the path leads through
// mappings and lists of the raw data.
func rawAt(raw map[string]any, path string) (any, bool) {
	var v any = raw
	for _, seg := range strings.Split(dottedPath(path), ".") {
		switch c := v.(type) {
		case map[string]any:
			next, ok := c[seg]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func fieldByTag(t reflect.Type, tag string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Tag.Get("koanf") == tag {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func typeNoun(t reflect.Type) string {
	if t == durationType {
		return "a duration"
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeNoun(t.Elem())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Struct, reflect.Map:
		return "a mapping"
	}
	return t.String()
}

func valueNoun(v any) string {
	switch reflect.ValueOf(v).Kind() {
	case reflect.Invalid:
		return "null"
	case reflect.Map:
		return "a mapping"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return strconv.Quote(fmt.Sprint(v))
}
