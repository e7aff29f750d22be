// Package apikeys owns the keys of relay's HTTP API (DESIGN.md, "API
// keys"): how a key is made, what relay keeps of it, the scopes it grants,
// and how a request's key is checked.
//
// A key is "rk_" and 32 random bytes in unpadded base64url, shown once when
// it is made ([Store.Add]). The bucket relay_keys keeps, under the key's
// name, only the SHA-256 of the key with its scopes, when it was made and
// when it was last used: whoever reads the bucket cannot use a key.
//
// [Verifier] follows the bucket: a key added or removed on any relay is
// taken or refused within the time its watch takes to deliver the change
// (well under a second on a healthy cluster). A presented key is hashed and
// compared with every stored hash in constant time. No key, hash or secret
// is in any error, log line or metric label of this package: only names.
//
// Scopes are a closed set ([Scopes]); [ParseScopes] is the one reading of
// them, called by `relay key add --scopes` and by the API alike. The scope
// admin grants every other.
package apikeys
