package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// built is one binary Build made, or why it could not.
type built struct {
	once sync.Once
	path string
	err  error
}

var (
	buildsMu sync.Mutex
	builds   = map[string]*built{}
)

// Build builds the main package pkg (an import path, such as relay's
// cmd/relay or the nats-server of go.mod) once per test binary, and returns
// the binary's path: the tests that kill processes run the real binaries.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	buildsMu.Lock()
	b, ok := builds[pkg]
	if !ok {
		b = &built{}
		builds[pkg] = b
	}
	buildsMu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "relay-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, path.Base(pkg))
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("testutil: go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// RemoveBuilds removes the binaries Build made; a TestMain calls it once
// every test is done with them.
func RemoveBuilds() {
	buildsMu.Lock()
	defer buildsMu.Unlock()
	for _, b := range builds {
		if b.path != "" {
			_ = os.RemoveAll(filepath.Dir(b.path))
		}
	}
}

// RunBuilt is the TestMain of a package whose tests run built binaries: it
// runs the tests, removes the binaries once every test is done with them,
// and fails a green run that left a goroutine behind. It returns the exit
// code for os.Exit.
func RunBuilt(m *testing.M) int {
	code := m.Run()
	RemoveBuilds()
	if code == 0 {
		if err := goleak.Find(IgnoreSpawner()); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
