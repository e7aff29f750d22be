package deliver

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseSecret(t *testing.T) {
	t.Parallel()

	key24 := []byte(strings.Repeat("k", 24))
	key25 := []byte(strings.Repeat("k", 25)) // needs padding in standard base64
	key64 := []byte(strings.Repeat("k", 64))

	tests := []struct {
		name    string
		secret  string
		want    []byte
		wantErr string
	}{
		{name: "reference secret", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", want: mustB64(t, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")},
		{name: "24 bytes", secret: "whsec_" + base64.StdEncoding.EncodeToString(key24), want: key24},
		{name: "64 bytes", secret: "whsec_" + base64.StdEncoding.EncodeToString(key64), want: key64},
		{name: "with padding", secret: "whsec_" + base64.StdEncoding.EncodeToString(key25), want: key25},
		{name: "without padding", secret: "whsec_" + base64.RawStdEncoding.EncodeToString(key25), want: key25},
		{name: "empty", secret: "", wantErr: "prefix is missing"},
		{name: "no prefix", secret: base64.StdEncoding.EncodeToString(key24), wantErr: "prefix is missing"},
		{name: "wrong prefix case", secret: "WHSEC_" + base64.StdEncoding.EncodeToString(key24), wantErr: "prefix is missing"},
		{name: "prefix only", secret: "whsec_", wantErr: "decodes to 0 bytes"},
		{name: "not base64", secret: "whsec_not base64 at all!!!!!!!!!!!", wantErr: "not standard base64"},
		{name: "url-safe alphabet", secret: "whsec_" + strings.Repeat("-_", 16), wantErr: "not standard base64"},
		{name: "too short", secret: "whsec_" + base64.StdEncoding.EncodeToString(key24[:23]), wantErr: "decodes to 23 bytes"},
		{name: "too long", secret: "whsec_" + base64.StdEncoding.EncodeToString(append(key64, 'k')), wantErr: "decodes to 65 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseSecret(tt.secret)
			// SecretKey answers as ParseSecret, the second time from what
			// it remembered; an error is never remembered as a key.
			for range 2 {
				key, keyErr := SecretKey(tt.secret)
				require.Equal(t, err, keyErr)
				require.Equal(t, got, key)
			}
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, ErrInvalidSecret)
			require.ErrorContains(t, err, `secret must be "whsec_" followed by base64 of 24–64 bytes`)
			require.ErrorContains(t, err, tt.wantErr)
			if len(tt.secret) > len("whsec_") {
				require.NotContains(t, err.Error(), tt.secret[len("whsec_"):], "an error must not repeat the secret")
			}
		})
	}
}

func TestMaskSecret(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		secret string
		want   string
	}{
		{name: "real secret", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", want: "whsec_MfKQ…"},
		{name: "empty", secret: "", want: ""},
		{name: "no prefix", secret: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", want: "…"},
		{name: "too short to show any", secret: "whsec_abcdefgh", want: "whsec_…"},
		{name: "prefix only", secret: "whsec_", want: "whsec_…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, MaskSecret(tt.secret))
		})
	}
}

func mustB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	return b
}
