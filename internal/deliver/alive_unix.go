//go:build linux || darwin || freebsd || netbsd || openbsd

package deliver

import (
	"errors"
	"syscall"
)

// alive reports whether an idle connection may carry a request: the server
// has neither closed it nor sent anything on it unasked (bytes that would be
// read as the reply to the next request). It peeks without waiting: one
// system call, where the Transport keeps a goroutine reading every idle
// connection.
func (c *conn1) alive() bool {
	if c.peek == nil {
		sc, ok := c.nc.(syscall.Conn)
		if !ok {
			return true
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		c.raw = raw
		c.peek = func(fd uintptr) bool {
			_, _, err := syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			c.peekOK = errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)
			return true // done: never wait for the socket to be readable
		}
	}
	c.peekOK = false
	return c.raw.Read(c.peek) == nil && c.peekOK
}

// peeks says whether alive can tell an idle connection the server closed.
const peeks = true
