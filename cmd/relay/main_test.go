package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestMain removes the relay binary the crash tests build, once they are
// all done with it.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}
