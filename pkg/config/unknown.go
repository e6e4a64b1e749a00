package config

// Unknown keys: which keys of the raw config match no field, and the
// "did you mean" each error offers (the closest valid key by edit
// distance, or an environment variable's missing level separator).

import (
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// unknownKeyErrors are the "unknown key" errors of msg, mapstructure's
// "has invalid keys: ..." at the mapping at name, each suggesting the
// closest valid key (spelt as the environment variable when one set it).
func unknownKeyErrors(raw map[string]any, name, msg string, envs envPaths) []error {
	var out []error
	keys, valid := unknownKeys(raw, name, msg)
	for _, k := range keys {
		path := joinPath(name, k)
		msg := "unknown key"
		// env is the variable that set k itself, "" when the file did.
		env := envs.find(dottedPath(path))
		if strings.Contains(env, ", ") || !strings.HasSuffix(env, strings.ToUpper(k)) {
			env = ""
		}
		if m := levelSplit(name, k, valid, env); m != "" {
			msg += ", did you mean " + m + "? (__ separates a key's levels, _ joins the words of one)"
		} else if m := closest(k, valid); m != "" {
			if env != "" {
				m = strings.TrimSuffix(env, strings.ToUpper(k)) + strings.ToUpper(m) // KRETRY_APP__URLL: KRETRY_APP__URL
			} else {
				m = strconv.Quote(m)
			}
			msg += ", did you mean " + m + "?"
		}
		out = append(out, envs.fieldError(path, msg))
	}
	return out
}

// levelSplit is env, the environment variable that set the unknown
// top-level key k, with the single _ after k's longest prefix that is a
// valid key doubled: KRETRY_APP_URL (key app_url) gives KRETRY_APP__URL.
// Every top-level key is a mapping, so the rest is a key inside it; below
// the top a prefix may be a leaf (app.timeout_ms), so "" there, and when
// env is "" (k came from the file) or no prefix of k is a key.
func levelSplit(name, k string, valid []string, env string) string {
	if name != "" || env == "" {
		return ""
	}
	upper := strings.ToUpper(k)
	for i := strings.LastIndexByte(k, '_'); i > 0; i = strings.LastIndexByte(k[:i], '_') {
		if slices.Contains(valid, k[:i]) {
			return strings.TrimSuffix(env, upper) + upper[:i] + "__" + upper[i+1:]
		}
	}
	return ""
}

// unknownKeys lists the keys of the raw mapping at path that match no
// field of the struct decoded there, and the keys valid there. It walks the
// data rather than parse mapstructure's comma-joined message, which is the
// fallback (without valid keys).
func unknownKeys(raw map[string]any, path, msg string) (unknown, valid []string) {
	if keys, valid, ok := unknownAt(raw, path); ok && len(keys) > 0 {
		return keys, valid
	}
	return strings.Split(strings.TrimPrefix(msg, "has invalid keys: "), ", "), nil
}

func unknownAt(raw map[string]any, path string) (unknown, valid []string, ok bool) {
	var (
		v any = raw
		t     = reflect.TypeOf(Config{})
	)
	if path != "" {
		for _, seg := range strings.Split(dottedPath(path), ".") {
			if i, err := strconv.Atoi(seg); err == nil {
				l, ok := v.([]any)
				if !ok || i >= len(l) || t.Kind() != reflect.Slice {
					return nil, nil, false
				}
				v, t = l[i], t.Elem()
				continue
			}
			m, ok := v.(map[string]any)
			if !ok || t.Kind() != reflect.Struct {
				return nil, nil, false
			}
			f, ok := fieldByTag(t, seg)
			if !ok {
				return nil, nil, false
			}
			v, t = m[seg], f.Type
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	m, ok := v.(map[string]any)
	if !ok || t.Kind() != reflect.Struct {
		return nil, nil, false
	}
	for k := range m {
		if _, ok := fieldByTag(t, k); !ok {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(unknown)
	for i := range t.NumField() {
		if tag := t.Field(i).Tag.Get("koanf"); tag != "" {
			valid = append(valid, tag)
		}
	}
	return unknown, valid, true
}

// Closest returns the name in valid nearest to name, for a "did you
// mean" hint (a config key, a command's flag); "" when none is near: an
// edit distance of at most a third of the shorter name, and at least 1.
func Closest(name string, valid []string) string { return closest(name, valid) }

// closest returns the valid key nearest to key, compared in lower case by
// EditDistance, if it is near enough to be a typo: at most a third of the
// shorter key's length, at least one edit. Ties go to the earlier key in
// valid.
func closest(key string, valid []string) string {
	best, bestD := "", -1
	for _, v := range valid {
		d := EditDistance(strings.ToLower(key), v)
		if d <= max(1, min(len(key), len(v))/3) && (bestD < 0 || d < bestD) {
			best, bestD = v, d
		}
	}
	return best
}

// EditDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and adjacent transpositions, bytes.
func EditDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
