package api

import (
	"bytes"
	"io"
)

// readAll reads a body whole.
func readAll(r io.Reader) ([]byte, error) {
	var b bytes.Buffer
	_, err := b.ReadFrom(r)
	return b.Bytes(), err
}
