package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
)

// SyntaxError is a file that is not YAML. It prints as
//
//	parse YAML: line 7: did not find expected key (check the indentation): "     jitter: 0.1"
type SyntaxError struct {
	// Line is the 1-based line at fault, 0 when unknown.
	Line int
	// Msg is the YAML parser's message without its line number.
	Msg string
	// Text is the line at fault, as written.
	Text string
}

func (e *SyntaxError) Error() string {
	if e.Line == 0 {
		return "parse YAML: " + e.Msg
	}
	s := fmt.Sprintf("parse YAML: line %d: %s", e.Line, e.Msg)
	if indentation.MatchString(e.Msg) {
		s += " (check the indentation)"
	}
	return s + ": " + strconv.Quote(e.Text)
}

var (
	yamlLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?`)
	// indentation matches the parser's messages for a line indented
	// differently from its siblings.
	indentation = regexp.MustCompile(`did not find expected (key|'-' indicator)|mapping values are not allowed|tab character that violates indentation`)
)

// syntaxError turns the YAML parser's error into a *SyntaxError naming the
// line at fault. The parser (go.yaml.in/yaml/v3) reports the line where the
// enclosing block starts, 0-based, rather than the line that breaks it, so
// a misindented key deep in topics[0] is blamed on the line of `- name:`.
// The line at fault is the first one at which the file, cut after it,
// fails with the same message; when no cut does, the parser's line stays.
func syntaxError(b []byte, err error) error {
	msg := err.Error()
	m := yamlLine.FindStringSubmatch(msg)
	if m == nil {
		return fmt.Errorf("parse YAML: %w", err)
	}
	e := &SyntaxError{Msg: msg[len(m[0]):]}
	lines := strings.SplitAfter(string(b), "\n")
	if len(lines) <= 5000 { // quadratic; config files are short
		p := yaml.Parser()
		for n := 1; n <= len(lines); n++ {
			_, perr := p.Unmarshal([]byte(strings.Join(lines[:n], "")))
			if perr == nil {
				continue
			}
			if pm := yamlLine.FindStringSubmatch(perr.Error()); pm != nil && perr.Error()[len(pm[0]):] == e.Msg {
				e.Line = n
				break
			}
		}
	}
	if e.Line == 0 && m[1] != "" {
		e.Line, _ = strconv.Atoi(m[1])
	}
	if e.Line > 0 && e.Line <= len(lines) {
		e.Text = strings.TrimRight(lines[e.Line-1], "\r\n")
	}
	return e
}
