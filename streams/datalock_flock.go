//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package streams

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on f without waiting, and reports
// whether it got it. A flock belongs to the open file: a second LockData in
// the same process is refused as another process's would be.
func lockFile(f *os.File) (bool, error) {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		default:
			return false, err
		}
	}
}
