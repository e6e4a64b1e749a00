//go:build race

package e2e

// raceBuild builds the kretry binary with the race detector.
const raceBuild = true
