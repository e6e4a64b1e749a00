package kafkatest

// PID is the process id of node id's JVM (1-based), 0 when the node is
// not running. Benchmarks read the broker's CPU time from /proc/<pid>/stat
// with it.
func (c *Cluster) PID(id int) int {
	n, err := c.node(id)
	if err != nil {
		return 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	select {
	case <-n.done:
		return 0
	default:
		return n.cmd.Process.Pid
	}
}
