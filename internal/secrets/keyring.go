package secrets

import (
	"bufio"
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strings"
)

// KeySize is the size of a key: 32 bytes, for AES-256.
const KeySize = 32

// prefix starts every sealed value; v1 is AES-256-GCM with a 12-byte random
// nonce, keyed as the key id says.
const prefix = "sealed:v1:"

// SealedPrefix starts every sealed value: a credential given in the clear
// must not begin with it.
const SealedPrefix = prefix

// idLen is how many bytes of the key's SHA-256 its id shows, in hex: 48
// bits, enough that two keys of one deployment never share an id.
const idLen = 6

// Keyring is the keys a relay seals and opens with: the current one, which
// seals, and older ones by id, which only open. A nil *Keyring holds no key:
// it seals nothing (values stay in the clear) and opens no sealed value. A Keyring
// is safe for concurrent use.
type Keyring struct {
	keys []key // the current key first
}

type key struct {
	id   string
	aead cipher.AEAD
}

// NewKeyring returns a keyring of raw keys, each [KeySize] bytes, the
// current first. A key given twice is kept once.
func NewKeyring(raw ...[]byte) (*Keyring, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: no key", ErrKeyFile)
	}
	k := &Keyring{}
	for i, r := range raw {
		if len(r) != KeySize {
			return nil, fmt.Errorf("%w: key %d is %d bytes, not %d", ErrKeyFile, i+1, len(r), KeySize)
		}
		id := KeyID(r)
		if slices.ContainsFunc(k.keys, func(o key) bool { return o.id == id }) {
			continue
		}
		block, err := aes.NewCipher(r)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
		}
		k.keys = append(k.keys, key{id: id, aead: aead})
	}
	return k, nil
}

// ParseKeys reads the keys of a key file: one a line, the standard base64
// of [KeySize] bytes (padded or not), the current key first; blank lines and
// lines starting with # are skipped. Errors wrap [ErrKeyFile], name the
// line, and never quote it.
func ParseKeys(data []byte) (*Keyring, error) {
	var raw [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		enc := base64.RawStdEncoding
		if strings.HasSuffix(line, "=") {
			enc = base64.StdEncoding
		}
		b, err := enc.DecodeString(line)
		if err != nil || len(b) != KeySize {
			return nil, fmt.Errorf("%w: line %d is not the base64 of %d bytes (make a key with: relay secrets new-key)", ErrKeyFile, n, KeySize)
		}
		raw = append(raw, b)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: it holds no key (make one with: relay secrets new-key)", ErrKeyFile)
	}
	return NewKeyring(raw...)
}

// LoadFile reads a key file with [ParseKeys]; its errors name the file.
func LoadFile(path string) (*Keyring, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	k, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// NewKey returns a new random key as a key file's line holds it: the
// standard base64 of [KeySize] random bytes.
func NewKey() (string, error) {
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("generating a key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// KeyID is the id of a raw key: the hex of the first 6 bytes of the SHA-256
// of "relay secrets key" and the key.
func KeyID(raw []byte) string {
	h := sha256.New()
	h.Write([]byte("relay secrets key\x00"))
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil)[:idLen])
}

// Current is the id of the key that seals; empty for a nil keyring.
func (k *Keyring) Current() string {
	if k == nil {
		return ""
	}
	return k.keys[0].id
}

// IDs are the ids of every key, the current first.
func (k *Keyring) IDs() []string {
	if k == nil {
		return nil
	}
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = key.id
	}
	return ids
}

// Seal returns plain sealed under the current key, bound to context: only
// [Keyring.Open] with the same context opens it. A nil keyring returns plain
// as it is, and so does every keyring for the empty string. A clear value
// that looks sealed is sealed as any other: callers refuse such values
// where a user gives them (a clear one would be read as sealed).
func (k *Keyring) Seal(plain, context string) (string, error) {
	if k == nil || plain == "" {
		return plain, nil
	}
	cur := k.keys[0]
	nonce := make([]byte, cur.aead.NonceSize(), cur.aead.NonceSize()+len(plain)+cur.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("sealing: %w", err)
	}
	out := cur.aead.Seal(nonce, nonce, []byte(plain), []byte(context))
	return prefix + cur.id + ":" + base64.RawStdEncoding.EncodeToString(out), nil
}

// Open returns the clear value of a value sealed with context. A value that
// is not sealed is returned as it is. A value sealed under a key the
// keyring lacks (any, for a nil keyring) is a [*MissingKeyError]; one that
// does not open under its key wraps [ErrTampered].
func (k *Keyring) Open(value, context string) (string, error) {
	if !IsSealed(value) {
		return value, nil
	}
	id, data, ok := strings.Cut(value[len(prefix):], ":")
	if !ok {
		return "", fmt.Errorf("%w: it has no key id", ErrTampered)
	}
	var aead cipher.AEAD
	if k != nil {
		for _, key := range k.keys {
			if key.id == id {
				aead = key.aead
				break
			}
		}
	}
	if aead == nil {
		return "", &MissingKeyError{KeyID: id}
	}
	raw, err := base64.RawStdEncoding.DecodeString(data)
	if err != nil || len(raw) < aead.NonceSize()+aead.Overhead() {
		return "", fmt.Errorf("%w: key %s: not base64 of a nonce and a ciphertext", ErrTampered, id)
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(context))
	if err != nil {
		return "", fmt.Errorf("%w: key %s", ErrTampered, id)
	}
	return string(plain), nil
}

// IsSealed reports whether s is a sealed value (of any key).
func IsSealed(s string) bool { return strings.HasPrefix(s, prefix) }

// SealedWith is the id of the key that sealed s, and whether s is sealed.
func SealedWith(s string) (string, bool) {
	if !IsSealed(s) {
		return "", false
	}
	id, _, _ := strings.Cut(s[len(prefix):], ":")
	return id, true
}

// Mask is a sealed value as it may be printed: that it is sealed and the
// id of its key, nothing of its ciphertext.
func Mask(s string) string {
	id, _ := SealedWith(s)
	return "sealed:" + id
}
