package deliver

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"time"
)

// TLS is how relay speaks TLS to one receiver beyond the defaults: a client
// certificate for mutual TLS, and a private CA to trust besides the
// system's roots. It is stored with the subscriber (PEM text), so that every
// relay of a cluster uses it; the private key is masked wherever the
// subscriber is printed.
type TLS struct {
	// ClientCert is the client certificate, PEM, with its intermediates
	// after it; ClientKey its private key, PEM (PKCS #1, PKCS #8 or EC).
	// Both or neither.
	ClientCert string `json:"client_cert,omitempty"`
	ClientKey  string `json:"client_key,omitempty"`
	// CACert holds PEM certificates of the CAs that may sign the
	// receiver's certificate, trusted in addition to the system's roots.
	CACert string `json:"ca_cert,omitempty"`
}

// ErrTLS means a subscriber's TLS setting cannot be used: a certificate or
// key that does not parse, a key that does not match its certificate, a
// certificate without its key.
var ErrTLS = errors.New("invalid TLS setting")

// Check reports whether t can be used, as [ErrTLS] wrapped with what is
// wrong; it never quotes the key.
func (t *TLS) Check() error {
	_, err := t.config()
	return err
}

// Certificate is the client certificate's leaf, nil when there is none.
func (t *TLS) Certificate() *x509.Certificate {
	if t == nil || t.ClientCert == "" {
		return nil
	}
	block, _ := pem.Decode([]byte(t.ClientCert))
	if block == nil {
		return nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return cert
}

// config is the base of the tls.Config of every connection to the receiver
// (the server name is each connection's own).
func (t *TLS) config() (*tls.Config, error) {
	cfg := &tls.Config{}
	switch {
	case t.ClientCert != "" && t.ClientKey == "":
		return nil, fmt.Errorf("%w: a client certificate needs its private key", ErrTLS)
	case t.ClientCert == "" && t.ClientKey != "":
		return nil, fmt.Errorf("%w: a private key needs its client certificate", ErrTLS)
	case t.ClientCert != "":
		if err := pemOnly(t.ClientCert, "client certificate", "CERTIFICATE"); err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair([]byte(t.ClientCert), []byte(t.ClientKey))
		if err != nil {
			// tls's errors name the failure (no PEM, a key of another
			// certificate) and quote nothing of the key.
			return nil, fmt.Errorf("%w: client certificate and key: %w", ErrTLS, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if t.CACert != "" {
		if err := pemOnly(t.CACert, "CA certificate", "CERTIFICATE"); err != nil {
			return nil, err
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		rest := []byte(t.CACert)
		for {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: CA certificate: %w", ErrTLS, err)
			}
			pool.AddCert(cert)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// pemOnly checks that text is PEM blocks of the given type and nothing
// else but white space, so that a key file given for a certificate (or a
// file of something else) is named for what it is.
func pemOnly(text, what, kind string) error {
	rest := []byte(text)
	n := 0
	for {
		block, next := pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != kind {
			return fmt.Errorf("%w: the %s holds a %s block, not %s", ErrTLS, what, block.Type, kind)
		}
		n++
		rest = next
	}
	if n == 0 {
		return fmt.Errorf("%w: the %s is not PEM (-----BEGIN %s-----)", ErrTLS, what, kind)
	}
	for _, c := range rest {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return fmt.Errorf("%w: the %s has text after its last PEM block", ErrTLS, what)
		}
	}
	return nil
}

// tlsDoers are the Doers of the receivers with a TLS setting of their own,
// one per setting: each has its own connections, since a connection made
// with one client certificate must never carry another subscriber's
// request.
type tlsDoers struct {
	build func(base *tls.Config) roundTripper

	mu    sync.Mutex
	doers map[TLS]*tlsDoer
	// bySetting finds a subscriber's Doer by its setting's pointer (the
	// subscriber view's, the same for every delivery until the subscriber
	// changes), without hashing its PEM for each delivery.
	bySetting map[*TLS]*tlsDoer
	// swept is the number of doers after the last sweep, sweptAt its
	// time; the next comes when it has doubled, or after cacheSweepEvery.
	swept   int
	sweptAt time.Time
}

// tlsDoer is one setting's Doer, or why the setting cannot be used.
type tlsDoer struct {
	rt       roundTripper
	err      error
	lastUsed time.Time
}

// tlsDoerIdle is how long a setting's Doer is kept unused: as long as its
// idle connections, after which it holds nothing worth keeping.
const tlsDoerIdle = idleConnTimeout

func newTLSDoers(build func(base *tls.Config) roundTripper) *tlsDoers {
	return &tlsDoers{build: build, doers: make(map[TLS]*tlsDoer), bySetting: make(map[*TLS]*tlsDoer)}
}

// get returns the Doer of setting t, built (and its PEM parsed) on first
// use.
func (d *tlsDoers) get(t *TLS, now time.Time) (Doer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if now.Sub(d.sweptAt) > cacheSweepEvery || len(d.doers) >= 2*d.swept+16 {
		d.sweepLocked(now)
	}
	e, ok := d.bySetting[t]
	if !ok {
		e, ok = d.doers[*t]
	}
	if !ok {
		e = &tlsDoer{}
		base, err := t.config()
		if err != nil {
			e.err = err
		} else {
			e.rt = d.build(base)
		}
		d.doers[*t] = e
	}
	d.bySetting[t] = e
	e.lastUsed = now
	if e.err != nil {
		return nil, e.err
	}
	return e.rt, nil
}

// sweepLocked drops the Doers unused for tlsDoerIdle, closing their idle
// connections: settings no subscriber has any more, their keys with them.
// The pointers are forgotten too, and found again on their next delivery.
func (d *tlsDoers) sweepLocked(now time.Time) {
	for key, e := range d.doers {
		if now.Sub(e.lastUsed) > tlsDoerIdle {
			if e.err == nil {
				e.rt.CloseIdleConnections()
			}
			delete(d.doers, key)
		}
	}
	clear(d.bySetting)
	d.swept, d.sweptAt = len(d.doers), now
}

// closeIdle closes every setting's idle connections.
func (d *tlsDoers) closeIdle() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.doers {
		if e.err == nil {
			e.rt.CloseIdleConnections()
		}
	}
}
