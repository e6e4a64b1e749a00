package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/kretry/kretry/pkg/flow"
)

func init() {
	// flow.Version goes into the kretry-version header of every moved
	// record and into the logs; stamp it unless the linker set it.
	if flow.Version == "dev" {
		bi, _ := debug.ReadBuildInfo()
		flow.Version = buildVersion(bi)
	}
}

// buildVersion is the version recorded in the binary: the main module's
// version when it was built as a module (go install …@v1.2.3, or a
// pseudo-version go build derives from a VCS tag), else the VCS revision
// (12 hex digits, "+dirty" when the work tree had changes), else "dev".
func buildVersion(bi *debug.BuildInfo) string {
	if bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

// cmdVersion is `kretry version`.
func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := versionCmd.flagSet(stderr)
	if code, done := versionCmd.parse(fs, args, stdout, stderr); done {
		return code
	}
	fmt.Fprintf(stdout, "kretry %s (%s %s/%s)\n", flow.Version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
