//go:build !linux

package testutil

import "os/exec"

// dieWithParent does nothing here: only Linux can tie a child's life to its
// parent's; the test's cleanup still kills it.
func dieWithParent(*exec.Cmd) {}

// start starts cmd.
func start(cmd *exec.Cmd) error { return cmd.Start() }
