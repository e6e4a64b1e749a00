//go:build !unix

package gameday

// cpuSeconds is not measured here.
func cpuSeconds() float64 { return -1 }
