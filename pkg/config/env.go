package config

// Environment overrides: KRETRY_… variables become koanf paths, merged
// into the YAML (lists by index), each remembered with the variable that
// set it so that an error names it.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// envPaths maps the dotted koanf path of each override (app.max_in_flight,
// topics.0.name) to the variable that set it.
type envPaths map[string]string

// EnvVar is the environment variable that overrides the config key key
// (dotted, as errors name it): app.max_in_flight is
// KRETRY_APP__MAX_IN_FLIGHT; transform reads it back.
func EnvVar(key string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "__"))
}

// transform turns KRETRY_APP__MAX_IN_FLIGHT into app.max_in_flight.
func (e envPaths) transform(name, value string) (string, any) {
	if name == EnvConfigFile || strings.HasPrefix(name, EnvTestPrefix) {
		return "", nil
	}
	path := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, EnvPrefix), "__", "."))
	if path == "" {
		return "", nil
	}
	e[path] = name
	return path, value
}

// merge lays the environment map (src) over the file (dest). Unlike
// koanf's default merge it descends into lists: a numeric path element
// indexes the list (KRETRY_TOPICS__0__GROUP) or, when it is the next free
// index, appends to it.
func (e envPaths) merge(src, dest map[string]any) error {
	var errs []error
	for k, v := range src {
		merged, err := e.mergeValue(k, dest[k], v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dest[k] = merged
	}
	return errors.Join(errs...)
}

func (e envPaths) mergeValue(path string, dst, src any) (any, error) {
	sm, ok := src.(map[string]any)
	if !ok {
		return src, nil
	}
	switch d := dst.(type) {
	case map[string]any:
		var errs []error
		for k, v := range sm {
			merged, err := e.mergeValue(path+"."+k, d[k], v)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			d[k] = merged
		}
		return d, errors.Join(errs...)
	case []any:
		return e.mergeList(path, d, sm)
	case nil:
		if isIndexMap(sm) {
			return e.mergeList(path, nil, sm)
		}
		return e.mergeValue(path, map[string]any{}, sm)
	}
	return src, nil
}

func isIndexMap(m map[string]any) bool {
	for k := range m {
		if _, err := strconv.Atoi(k); err != nil {
			return false
		}
	}
	return len(m) > 0
}

func (e envPaths) mergeList(path string, dst []any, src map[string]any) (any, error) {
	idx := make([]int, 0, len(src))
	for k := range src {
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || k != strconv.Itoa(i) {
			p := path + "." + k
			return nil, &FieldError{Path: displayPath(p), Msg: fmt.Sprintf("%q is not a list index", k), Env: e.find(p)}
		}
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := slices.Clone(dst)
	var errs []error
	for _, i := range idx {
		k := strconv.Itoa(i)
		p := path + "." + k
		if i > len(out) {
			errs = append(errs, &FieldError{
				Path: displayPath(p),
				Msg:  fmt.Sprintf("index %d is past the end of the list (length %d)", i, len(out)),
				Env:  e.find(p),
			})
			continue
		}
		var cur any
		if i < len(out) {
			cur = out[i]
		}
		merged, err := e.mergeValue(p, cur, src[k])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if i == len(out) {
			out = append(out, merged)
		} else {
			out[i] = merged
		}
	}
	return out, errors.Join(errs...)
}

// find returns the variable that set the dotted path, one of its parents
// (a list split from one string) or, failing that, its children (a key
// unknown as a whole), joined with ", ".
func (e envPaths) find(dotted string) string {
	if dotted == "" {
		return ""
	}
	for p := dotted; ; {
		if name, ok := e[p]; ok {
			return name
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	var names []string
	for p, name := range e {
		if strings.HasPrefix(p, dotted+".") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// dottedPath turns topics[0].retry into topics.0.retry (koanf's form).
func dottedPath(p string) string {
	p = strings.ReplaceAll(p, "[", ".")
	p = strings.ReplaceAll(p, "]", "")
	return strings.TrimPrefix(p, ".")
}

// displayPath turns topics.0.retry into topics[0].retry.
func displayPath(dotted string) string {
	var b strings.Builder
	for i, s := range strings.Split(dotted, ".") {
		if _, err := strconv.Atoi(s); err == nil && i > 0 {
			b.WriteString("[" + s + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// fieldError is the *FieldError msg at path, naming the environment
// variable that set path, if one did.
func (e envPaths) fieldError(path, msg string) error {
	return &FieldError{Path: path, Msg: msg, Env: e.find(dottedPath(path))}
}

// annotate adds the environment variable to each *FieldError in a join.
func annotate(err error, envs envPaths) error {
	if len(envs) == 0 {
		return err
	}
	for _, e := range unwrapJoin(err) {
		var fe *FieldError
		if errors.As(e, &fe) && fe.Env == "" && fe.Path != "" {
			fe.Env = envs.findExact(dottedPath(fe.Path))
		}
	}
	return err
}

// findExact is find without the children: a Validate error about a list
// (kafka.brokers) should name the variable that set the list but not one
// that set only a sibling.
func (e envPaths) findExact(dotted string) string {
	for p := dotted; ; {
		if name, ok := e[p]; ok {
			return name
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return ""
		}
		p = p[:i]
	}
}
