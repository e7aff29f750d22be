package deadletter

import (
	"encoding/base64"
	"time"
	"unicode/utf8"
)

// Shown is a dead letter as `relay dlq show --json`, the HTTP API and the
// NATS service show it: the entry's fields, its subject, every header and
// the body, as text when it is UTF-8 and else in base64; neither for a
// [Message.Bodiless] entry.
type Shown struct {
	Entry
	Subject    string              `json:"subject"`
	StoredAt   time.Time           `json:"stored_at"`
	Headers    map[string][]string `json:"headers"`
	Body       *string             `json:"body,omitempty"`
	BodyBase64 *string             `json:"body_base64,omitempty"`
}

// Show is m as [Shown] shows it.
func (m Message) Show() Shown {
	v := Shown{Entry: m.Entry, Subject: m.Subject, StoredAt: m.Stored, Headers: map[string][]string(m.Header)}
	if v.Headers == nil {
		v.Headers = map[string][]string{}
	}
	switch {
	case m.Bodiless():
		// No body: neither "body" nor "body_base64".
	case utf8.Valid(m.Body):
		s := string(m.Body)
		v.Body = &s
	default:
		s := base64.StdEncoding.EncodeToString(m.Body)
		v.BodyBase64 = &s
	}
	return v
}
