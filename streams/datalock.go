package streams

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LockFile is the file inside a data directory that `relay run` locks while
// its embedded server stores there. It holds the process id of the holder.
const LockFile = "relay.lock"

// ErrDataInUse is returned when another process holds a data directory's
// lock: two embedded servers on one directory would overwrite each other's
// JetStream files, and the first relay's subscribers would be lost.
var ErrDataInUse = errors.New("data directory in use")

// DataLock is one process's hold on a data directory, from LockData until
// Unlock (or the process's end: the system releases it then, so a relay
// killed with kill -9 leaves no stale lock).
type DataLock struct {
	f *os.File
}

// LockData creates dir if need be and locks it for this process, without
// waiting: a directory another process holds is refused at once with
// ErrDataInUse, naming the holder's process id. A directory that cannot be
// created or written is refused at once too, with the system's reason.
func LockData(dir string) (*DataLock, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("data directory: %w", err)
	}
	locked, err := lockFile(f)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if !locked {
		holder := "another process"
		if pid, ok := readHolder(f); ok {
			holder = "process " + strconv.Itoa(pid)
		}
		_ = f.Close()
		return nil, fmt.Errorf("%w: %s holds %s", ErrDataInUse, holder, path)
	}
	// The holder's id, for the refusal a second process gets.
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("data directory: %w", err)
	}
	return &DataLock{f: f}, nil
}

// Unlock releases the directory. The file stays: removing it could let a
// process that opened it meanwhile lock a file no one else sees.
func (l *DataLock) Unlock() error {
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("unlocking %s: %w", l.f.Name(), err)
	}
	return nil
}

// readHolder reads the process id a lock file holds.
func readHolder(f *os.File) (int, bool) {
	buf := make([]byte, 32)
	n, _ := f.ReadAt(buf, 0)
	pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n])))
	return pid, err == nil && pid > 0
}
