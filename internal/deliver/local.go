package deliver

import (
	"errors"
	"net"
	"strings"
	"syscall"
)

// localErrnos are the errors with which a dial fails for want of something on
// this host rather than because of the subscriber: a file descriptor for the
// socket (EMFILE for the process, ENFILE for the system), kernel socket
// buffers (ENOBUFS), memory (ENOMEM), or a free local port to connect from
// (EADDRNOTAVAIL, the usual sign of ephemeral ports exhausted by connections
// in TIME_WAIT).
//
// EADDRNOTAVAIL has a second cause: connecting to an IPv6 address from a host
// with no IPv6 address of its own. That too is this host's doing, but it
// will not pass by itself, so a caller that hands local failures back must
// not do so for ever.
var localErrnos = [...]syscall.Errno{
	syscall.EMFILE,
	syscall.ENFILE,
	syscall.ENOBUFS,
	syscall.ENOMEM,
	syscall.EADDRNOTAVAIL,
}

// localDialFailure says whether err is a dial that failed for a local reason
// (see localErrnos). Only a dial counts: once connected, the request may have
// reached the subscriber, and that is an attempt whatever went wrong next.
//
// net/http returns a failed dial as a *url.Error around a *net.OpError with
// Op "dial", around an *os.SyscallError ("socket", "bind", "connect") around
// the syscall.Errno, and errors.Is finds the errno through all of them. A
// dial that failed in name resolution is a *net.OpError around a
// *net.DNSError, which keeps only the text of the error its resolver met
// ("dial udp 127.0.0.53:53: socket: too many open files"), so there the errno
// is recognised by the end of that text. With descriptors exhausted, that is
// the failure a URL with a host name usually meets first.
func localDialFailure(err error) bool {
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "dial" {
		return false
	}
	for _, errno := range localErrnos {
		if errors.Is(op.Err, errno) {
			return true
		}
	}
	var dns *net.DNSError
	if errors.As(op.Err, &dns) {
		for _, errno := range localErrnos {
			if strings.HasSuffix(dns.Err, ": "+errno.Error()) || dns.Err == errno.Error() {
				return true
			}
		}
	}
	return false
}
