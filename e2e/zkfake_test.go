package e2e

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// zkFake is the least ZooKeeper that Burrow 1.2 needs to start: Burrow
// refuses to run without a ZooKeeper, and uses it only to create its root
// path and to take a lock before running notifiers (none in the tests);
// its lag evaluation (the HTTP API the tests read) needs nothing from it.
// It speaks the ZooKeeper client protocol (jute-encoded, length-prefixed
// frames) for connect, ping, create (sequential too), exists, getChildren2,
// delete and close, on an in-memory tree of znodes without data. Anything
// else is answered with the error "unimplemented" (-6). It is not a
// ZooKeeper: no watches, no sessions beyond one connection, no data.
type zkFake struct {
	ln net.Listener

	mu    sync.Mutex
	nodes map[string]bool
	seq   int
	zxid  int64
	sid   int64
}

// startZKFake serves on a loopback port until the test ends.
func startZKFake(t *testing.T) *zkFake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z := &zkFake{ln: ln, nodes: map[string]bool{"/": true}}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { z.serve(c) })
		}
	})
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return z
}

func (z *zkFake) addr() string { return z.ln.Addr().String() }

// ZooKeeper error codes (org.apache.zookeeper.KeeperException.Code).
const (
	zkOK            = 0
	zkUnimplemented = -6
	zkNoNode        = -101
	zkNodeExists    = -110
	zkNotEmpty      = -111
)

// zkReader decodes jute fields.
type zkReader struct {
	b   []byte
	err error
}

func (r *zkReader) int32() int32 {
	if len(r.b) < 4 {
		r.err = io.ErrUnexpectedEOF
		return 0
	}
	v := int32(binary.BigEndian.Uint32(r.b))
	r.b = r.b[4:]
	return v
}

func (r *zkReader) bytes() []byte {
	n := r.int32()
	if n < 0 || r.err != nil {
		return nil
	}
	if len(r.b) < int(n) {
		r.err = io.ErrUnexpectedEOF
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *zkReader) string() string { return string(r.bytes()) }

// zkWriter encodes jute fields.
type zkWriter struct{ b []byte }

func (w *zkWriter) int32(v int32) { w.b = binary.BigEndian.AppendUint32(w.b, uint32(v)) }
func (w *zkWriter) int64(v int64) { w.b = binary.BigEndian.AppendUint64(w.b, uint64(v)) }
func (w *zkWriter) bytes(v []byte) {
	w.int32(int32(len(v)))
	w.b = append(w.b, v...)
}
func (w *zkWriter) string(v string) { w.bytes([]byte(v)) }

// stat writes a Stat (czxid, mzxid, ctime, mtime, version, cversion,
// aversion, ephemeralOwner, dataLength, numChildren, pzxid).
func (w *zkWriter) stat(children int32) {
	for range 4 {
		w.int64(1)
	}
	for range 3 {
		w.int32(0)
	}
	w.int64(0)
	w.int32(0)
	w.int32(children)
	w.int64(1)
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, errors.New("frame too large")
	}
	b := make([]byte, size)
	_, err := io.ReadFull(r, b)
	return b, err
}

func writeFrame(w io.Writer, b []byte) error {
	_, err := w.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	if err == nil {
		_, err = w.Write(b)
	}
	return err
}

func (z *zkFake) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	// ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId,
	// passwd (and, from newer clients, readOnly).
	b, err := readFrame(br)
	if err != nil {
		return
	}
	r := &zkReader{b: b}
	r.int32()
	r.b = r.b[min(8, len(r.b)):] // lastZxidSeen
	timeout := r.int32()
	z.mu.Lock()
	z.sid++
	sid := z.sid
	z.mu.Unlock()
	var w zkWriter
	w.int32(0)
	w.int32(timeout)
	w.int64(0x6b72657472790000 + sid) // a non-zero session id
	w.bytes(make([]byte, 16))
	if writeFrame(c, w.b) != nil {
		return
	}
	for {
		b, err := readFrame(br)
		if err != nil {
			return
		}
		r := &zkReader{b: b}
		xid, op := r.int32(), r.int32()
		code, body := z.handle(op, r)
		z.mu.Lock()
		z.zxid++
		zxid := z.zxid
		z.mu.Unlock()
		var out zkWriter
		out.int32(xid)
		out.int64(zxid)
		out.int32(code)
		if code == zkOK {
			out.b = append(out.b, body...)
		}
		if writeFrame(c, out.b) != nil || op == -11 { // closeSession
			return
		}
	}
}

func parent(path string) string {
	i := strings.LastIndexByte(path, '/')
	if i <= 0 {
		return "/"
	}
	return path[:i]
}

func (z *zkFake) children(path string) []string {
	prefix := strings.TrimSuffix(path, "/") + "/"
	var out []string
	for p := range z.nodes {
		if p != "/" && strings.HasPrefix(p, prefix) && !strings.Contains(p[len(prefix):], "/") {
			out = append(out, p[len(prefix):])
		}
	}
	return out
}

// handle runs one request and returns the error code and response body.
func (z *zkFake) handle(op int32, r *zkReader) (int32, []byte) {
	z.mu.Lock()
	defer z.mu.Unlock()
	var w zkWriter
	switch op {
	case 11, -11: // ping, closeSession
		return zkOK, nil
	case 1: // create: path, data, acl, flags
		path := r.string()
		r.bytes()
		for n := r.int32(); n > 0 && r.err == nil; n-- {
			r.int32()
			r.string()
			r.string()
		}
		flags := r.int32()
		if flags&2 != 0 { // sequential
			path += fmt.Sprintf("%010d", z.seq)
			z.seq++
		}
		switch {
		case z.nodes[path]:
			return zkNodeExists, nil
		case !z.nodes[parent(path)]:
			return zkNoNode, nil
		}
		z.nodes[path] = true
		w.string(path)
		return zkOK, w.b
	case 2: // delete: path, version
		path := r.string()
		switch {
		case !z.nodes[path]:
			return zkNoNode, nil
		case len(z.children(path)) > 0:
			return zkNotEmpty, nil
		}
		delete(z.nodes, path)
		return zkOK, nil
	case 3: // exists: path, watch
		path := r.string()
		if !z.nodes[path] {
			return zkNoNode, nil
		}
		w.stat(int32(len(z.children(path))))
		return zkOK, w.b
	case 8, 12: // getChildren, getChildren2: path, watch
		path := r.string()
		if !z.nodes[path] {
			return zkNoNode, nil
		}
		cs := z.children(path)
		w.int32(int32(len(cs)))
		for _, c := range cs {
			w.string(c)
		}
		if op == 12 {
			w.stat(int32(len(cs)))
		}
		return zkOK, w.b
	}
	return zkUnimplemented, nil
}
