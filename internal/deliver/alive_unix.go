//go:build linux || darwin || freebsd || netbsd || openbsd

package deliver

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection may carry a request: the server
// has neither closed it nor sent anything on it unasked (bytes that would be
// read as the reply to the next request). It peeks without waiting: one
// system call, where the Transport keeps a goroutine reading every idle
// connection.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	ok = false
	err = raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		ok = errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK)
		return true
	})
	return err == nil && ok
}
