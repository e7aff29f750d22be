// Package secrets seals the credentials relay stores for its subscribers
// (signing secrets and keys, OAuth2 client secrets, mTLS private keys)
// under a key relay is given, so that whoever can read the subscribers
// bucket, its stream or a copy of the server's store reads none of them.
//
// A sealed value is one string, "sealed:v1:<key id>:<base64>": the base64
// (standard, unpadded) of a random 12-byte nonce followed by the AES-256-GCM
// ciphertext and tag of the clear value. The key id is a fingerprint of the
// key (the first 6 bytes of a SHA-256 of it, in hex), so that a value names
// the key that opens it without any registry of keys, and the id reveals
// nothing of the key. Each value is bound to a context (the subscriber's
// id): a sealed value copied to another subscriber does not open.
//
// A [Keyring] holds the current key, which seals, and older keys, which
// still open what they sealed: rotating the key is giving relay the new key
// first and the old one after it, re-sealing every value (`relay secrets
// rotate-key`), then dropping the old key. A key file holds one key a line,
// each the standard base64 of 32 random bytes (`relay secrets new-key`, or
// `openssl rand -base64 32`), the current key first; blank lines and lines
// starting with # are skipped.
//
// The package knows nothing of subscribers or NATS: package subscribers
// seals on every write and opens on every read.
package secrets
