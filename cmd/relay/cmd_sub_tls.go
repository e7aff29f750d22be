package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/relay-dev/relay/internal/deliver"
)

// tlsFlags are the flags of a subscriber's TLS setting: a client
// certificate and key for mutual TLS, a private CA to trust. Each names a
// PEM file, read once by the command; an empty name removes that part.
type tlsFlags struct {
	cert, key, ca string
}

func (f *tlsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.cert, "client-cert", "", "PEM file of the client certificate (and its intermediates) for mutual TLS, with --client-key ('' removes it)")
	fs.StringVar(&f.key, "client-key", "", "PEM file of the client certificate's private key ('' removes it)")
	fs.StringVar(&f.ca, "ca-cert", "", "PEM file of the CA certificates that sign the receiver's certificate, trusted besides the system's ('' removes it)")
}

// change reads the files of the TLS flags given on fs and returns what they
// change of a subscriber's setting (nil: none given): the setting it has,
// or a new one, with the parts given set; nil once no part is left.
func (f *tlsFlags) change(fs *pflag.FlagSet) (func(*deliver.TLS) *deliver.TLS, error) {
	read := func(flag, path string) (string, bool, error) {
		if !fs.Changed(flag[2:]) {
			return "", false, nil
		}
		if path == "" {
			return "", true, nil
		}
		text, err := readKeyFile(flag, path)
		return text, true, err
	}
	cert, certGiven, err := read("--client-cert", f.cert)
	if err != nil {
		return nil, err
	}
	key, keyGiven, err := read("--client-key", f.key)
	if err != nil {
		return nil, err
	}
	ca, caGiven, err := read("--ca-cert", f.ca)
	if err != nil {
		return nil, err
	}
	if !certGiven && !keyGiven && !caGiven {
		return nil, nil
	}
	return func(cur *deliver.TLS) *deliver.TLS {
		t := deliver.TLS{}
		if cur != nil {
			t = *cur
		}
		if certGiven {
			t.ClientCert = cert
		}
		if keyGiven {
			t.ClientKey = key
		}
		if caGiven {
			t.CACert = ca
		}
		if t == (deliver.TLS{}) {
			return nil
		}
		return &t
	}, nil
}

// tlsString is a TLS setting as `relay sub get` prints it: whose the client
// certificate is and until when, and how many CA certificates.
func tlsString(t *deliver.TLS) string {
	var parts []string
	if cert := t.Certificate(); cert != nil {
		parts = append(parts, fmt.Sprintf("client certificate %s (until %s)", cert.Subject.String(), cert.NotAfter.UTC().Format(time.RFC3339)))
	}
	if t.CACert != "" {
		parts = append(parts, fmt.Sprintf("CA certificates: %d", strings.Count(t.CACert, "-----BEGIN CERTIFICATE-----")))
	}
	return strings.Join(parts, ", ")
}
