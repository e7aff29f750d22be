package subscribers

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

// FuzzDecode feeds the bucket's value decoder arbitrary keys and values, as
// `nats kv put` could write them. A value is either refused with
// ErrCorrupt, or it is a valid subscriber under its key that encodes (as
// relay writes it) to a value that decodes to the same subscriber: same
// encoding, since time zones and empty-versus-absent lists only show
// there. `go test` runs the seeds; `make fuzz` fuzzes it.
func FuzzDecode(f *testing.F) {
	const secret = `"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"`
	for _, v := range []string{
		`{"id":"demo","url":"https://example.com/hook","secrets":[` + secret + `]}`,
		`{"url":"http://127.0.0.1:9000/","secrets":[` + secret + `],"events":["video.*","order.>"],"rate":2.5,"timeout":"10s","retry_base":1000000000,"retry_max":null}`,
		`{"id":"demo","url":"https://example.com/","secrets":[` + secret + `],"events":[],"headers":{"Authorization":"Bearer x"},"paused":true,"paused_until":"2026-01-01T00:00:00+05:30","created_at":"2026-01-01T00:00:00.5-01:00"}`,
		`{"id":"demo","url":"https://example.com/","secrets":[` + secret + `],"previous_secrets":[{"secret":` + secret + `,"until":"2026-01-01T00:00:00Z"}],"disabled":true,"disabled_reason":"410 Gone"}`,
		`{"id":"other","url":"https://example.com/","secrets":[` + secret + `]}`,
		`{"id":"demo","url":"https://user:pw@example.com/","secrets":[` + secret + `]}`,
		`{"id":"demo","url":"https://example.com/","secrets":[` + secret + `],"rate":1e400}`,
		`{"id":"demo","url":"https://example.com/","secrets":[` + secret + `],"timeout":1e9}`,
		`{"id":"demo","url":"https://example.com/","secrets":[` + secret + `],"max_attempts":1000,"max_in_flight":1024,"burst":0,"rate":0.001}`,
		`{"id":"demo","url":"https://example.com/","secrets":["whsec_\u00ff"],"events":["a..b"]}`,
		`null`, `[]`, `{}`, `{"id":"demo"`, "\xff",
	} {
		f.Add("demo", []byte(v))
	}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		sub, _, err := decode(key, value, nil)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode(%q) = %v, which does not wrap ErrCorrupt", key, err)
			}
			return
		}
		if sub.ID != key {
			t.Fatalf("key %q decoded to subscriber %q", key, sub.ID)
		}
		if err := sub.Validate(); err != nil {
			t.Fatalf("decode accepted an invalid subscriber: %v", err)
		}
		encoded, err := json.Marshal(sub)
		if err != nil {
			t.Fatalf("a decoded subscriber does not encode: %v", err)
		}
		again, _, err := decode(key, encoded, nil)
		if err != nil {
			t.Fatalf("relay's own encoding %s of %s does not decode: %v", encoded, value, err)
		}
		reencoded, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("the second decoding does not encode: %v", err)
		}
		if !bytes.Equal(encoded, reencoded) {
			t.Fatalf("a round trip changed the subscriber:\n%s\n%s", encoded, reencoded)
		}
	})
}
