package kafkatest

import "strconv"

func itoa(i int) string { return strconv.Itoa(i) }

// pids are the running nodes' process ids.
func (c *Cluster) pids() []int {
	var out []int
	for _, n := range c.nodes {
		n.mu.Lock()
		if n.cmd != nil {
			out = append(out, n.cmd.Process.Pid)
		}
		n.mu.Unlock()
	}
	return out
}
