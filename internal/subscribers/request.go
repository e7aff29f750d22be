package subscribers

import (
	"net/http"
	"time"

	"github.com/relay-dev/relay/internal/deliver"
)

// Request is the HTTP request that delivers body to s under the event id
// id: its URL, signed with the keys s holds at now (every active key, and
// the retired ones still in their grace), with its configured headers, its
// timeout, its OAuth2 grant and its TLS setting. contentType is the event's
// own, "" for the default.
//
// It is the one way a request to a subscriber is built: the lanes build
// every delivery with it, and `relay sub test` its test request, so that a
// test is signed and authenticated exactly as a delivery is. The caller adds
// what belongs to its own request (a delivery's trace context). The headers
// are a copy, which the caller may change; nil when s has none.
//
// A subscriber whose credentials are sealed with a key not given gets no
// request: the error is its [*SealedError].
func (s *Subscriber) Request(id string, body []byte, contentType string, now time.Time) (deliver.Request, error) {
	if s.sealedWith != "" {
		return deliver.Request{}, s.sealedError()
	}
	keys, err := s.Keys(now)
	if err != nil {
		return deliver.Request{}, err
	}
	signingKeys, err := s.SigningKeys(now)
	if err != nil {
		return deliver.Request{}, err
	}
	var header http.Header
	if len(s.Headers) > 0 {
		header = make(http.Header, len(s.Headers))
		for k, v := range s.Headers {
			header.Set(k, v)
		}
	}
	return deliver.Request{
		URL:         s.URL,
		ID:          id,
		Body:        body,
		ContentType: contentType,
		Header:      header,
		Keys:        keys,
		SigningKeys: signingKeys,
		Timeout:     s.Timeout.Std(),
		OAuth2:      s.OAuth2,
		TLS:         s.TLS,
	}, nil
}
