package deliver

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The webhook-id a receiver sees is made from the event id (the publisher's
// Nats-Msg-Id, else EVENTS-<sequence>) by one mapping, the same on every
// relay, retry and replay:
//
//   - an id of letters, digits, '_', '-' and ':' alone, at most
//     [MaxWebhookID] bytes, is itself;
//   - any other byte is written ~XX (its value in two upper-case hex
//     digits), '~' included, so that "order.42.created" is
//     "order~2E42~2Ecreated": the Standard Webhooks spec signs
//     id.timestamp.body and forbids a dot in the id, and a header holds no
//     control character;
//   - an id whose escaped form would pass MaxWebhookID bytes is "~~" and the
//     hex SHA-256 of the id.
//
// Two different ids never map to one webhook-id that anyone can construct:
// the escaped form decodes back to its id (a '~' in it is always followed by
// two hex digits, so it never holds "~~", which the hashed form starts
// with), and the hashed form is a SHA-256.

// MaxWebhookID bounds a webhook-id in bytes.
const MaxWebhookID = 200

// WebhookID is the webhook-id of an event id (see above).
func WebhookID(eventID string) string {
	n := 0
	for i := 0; i < len(eventID); i++ {
		if safeIDByte(eventID[i]) {
			n++
		} else {
			n += 3
		}
	}
	switch {
	case n == len(eventID) && n <= MaxWebhookID:
		return eventID
	case n > MaxWebhookID:
		sum := sha256.Sum256([]byte(eventID))
		return "~~" + hex.EncodeToString(sum[:])
	}
	const digits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < len(eventID); i++ {
		c := eventID[i]
		if safeIDByte(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('~')
		b.WriteByte(digits[c>>4])
		b.WriteByte(digits[c&0x0f])
	}
	return b.String()
}

// safeIDByte is a byte a webhook-id carries as it is.
func safeIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':'
}

// EventIDOf is WebhookID's inverse: the event id whose webhook-id is
// webhookID, so that an operator may look an event up by the id its
// receiver logged. It reports false for a webhook-id no event id maps to
// by escaping, and for the hashed form of a long id, which does not decode.
func EventIDOf(webhookID string) (string, bool) {
	if strings.HasPrefix(webhookID, "~~") {
		return "", false
	}
	var b strings.Builder
	b.Grow(len(webhookID))
	for i := 0; i < len(webhookID); i++ {
		c := webhookID[i]
		if c != '~' {
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(webhookID) {
			return "", false
		}
		hi, lo := hexDigit(webhookID[i+1]), hexDigit(webhookID[i+2])
		if hi < 0 || lo < 0 {
			return "", false
		}
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	id := b.String()
	if WebhookID(id) != webhookID {
		return "", false
	}
	return id, true
}

// hexDigit is the value of an upper-case hex digit as WebhookID writes it,
// or -1.
func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
