package subscribers

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
)

// The request to a subscriber carries every part of it a delivery needs:
// one key per secret in force (the retired one during its grace alone),
// both kinds for --signing both, its headers as a copy the caller may
// change, its timeout, grant and TLS setting; the id, body and content
// type are the caller's.
func TestRequestCarriesTheSubscriber(t *testing.T) {
	t.Parallel()
	ed, err := deliver.NewSigningKey()
	require.NoError(t, err)
	now := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	sub := Subscriber{
		ID: "demo", URL: "https://example.com/hook", Secrets: []string{secretA, ed},
		PreviousSecrets: []PreviousSecret{{Secret: secretC, Until: now.Add(time.Hour)}},
		Headers:         map[string]string{"X-Team": "payments"},
		Timeout:         Duration(3 * time.Second),
		OAuth2:          &deliver.OAuth2{TokenURL: "https://auth.example.com/token", ClientID: "relay", ClientSecret: "s"},
		TLS:             &deliver.TLS{CACert: "ca"},
	}
	req, err := sub.Request("evt_1", []byte(`{}`), "text/plain", now)
	require.NoError(t, err)
	require.Equal(t, "https://example.com/hook", req.URL)
	require.Equal(t, "evt_1", req.ID)
	require.Equal(t, []byte(`{}`), req.Body)
	require.Equal(t, "text/plain", req.ContentType)
	require.Len(t, req.Keys, 2, "the active secret and the retired one in its grace")
	require.Len(t, req.SigningKeys, 1)
	require.Equal(t, 3*time.Second, req.Timeout)
	require.Same(t, sub.OAuth2, req.OAuth2)
	require.Same(t, sub.TLS, req.TLS)
	require.Equal(t, "payments", req.Header.Get("X-Team"))
	require.False(t, req.Inspect, "a delivery keeps nothing of a reply it does not need")

	req.Header.Set("Traceparent", "00-x")
	require.Len(t, sub.Headers, 1, "the headers are a copy")

	later, err := sub.Request("evt_1", nil, "", now.Add(2*time.Hour))
	require.NoError(t, err)
	require.Len(t, later.Keys, 1, "past its grace the retired secret no longer signs")

	sub.Headers = nil
	bare, err := sub.Request("evt_2", nil, "", now)
	require.NoError(t, err)
	require.Nil(t, bare.Header, "no headers: nothing allocated")
}
