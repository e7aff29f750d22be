package deliver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The Standard Webhooks reference vector, shared by every official library.
const (
	refSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	refID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	refTimestamp = int64(1614265330)
	refBody      = `{"test": 2432232314}`
	refSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignReferenceVector(t *testing.T) {
	t.Parallel()

	key, err := ParseSecret(refSecret)
	require.NoError(t, err)
	require.Equal(t, refSignature, Sign(key, refID, refTimestamp, []byte(refBody)))
	require.NoError(t, Verify([][]byte{key}, refID, strconv.FormatInt(refTimestamp, 10), refSignature,
		[]byte(refBody), time.Unix(refTimestamp, 0), 0))
}

func TestSignatures(t *testing.T) {
	t.Parallel()

	oldKey := []byte(strings.Repeat("o", 32))
	newKey := []byte(strings.Repeat("n", 32))
	body := []byte(`{"id":"evt_1"}`)

	require.Empty(t, Signatures(nil, "evt_1", 1, body))
	require.Equal(t, Sign(oldKey, "evt_1", 1, body), Signatures([][]byte{oldKey}, "evt_1", 1, body))

	both := Signatures([][]byte{oldKey, newKey}, "evt_1", 1, body)
	require.Equal(t, Sign(oldKey, "evt_1", 1, body)+" "+Sign(newKey, "evt_1", 1, body), both)
	// During a rotation, a receiver that knows only one of the keys accepts.
	for _, key := range [][]byte{oldKey, newKey} {
		require.NoError(t, Verify([][]byte{key}, "evt_1", "1", both, body, time.Unix(1, 0), 0))
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()

	key, err := ParseSecret(refSecret)
	require.NoError(t, err)
	other := []byte(strings.Repeat("x", 32))
	body := []byte(refBody)
	ts := strconv.FormatInt(refTimestamp, 10)
	now := time.Unix(refTimestamp, 0)
	sig := Sign(key, refID, refTimestamp, body)

	tests := []struct {
		name      string
		keys      [][]byte
		id        string
		ts        string
		sig       string
		body      []byte
		now       time.Time
		tolerance time.Duration
		wantErr   error
	}{
		{name: "valid", keys: [][]byte{key}, id: refID, ts: ts, sig: sig, body: body, now: now},
		{name: "second key matches", keys: [][]byte{other, key}, id: refID, ts: ts, sig: sig, body: body, now: now},
		{name: "one of several signatures matches", keys: [][]byte{key}, id: refID, ts: ts,
			sig: "v1,Zm9yZ2Vk v1a,c29tZXRoaW5n " + sig, body: body, now: now},
		{name: "extra spaces", keys: [][]byte{key}, id: refID, ts: ts, sig: "  " + sig + "  ", body: body, now: now},
		{name: "just inside default tolerance, old", keys: [][]byte{key}, id: refID, ts: ts, sig: sig, body: body,
			now: now.Add(5 * time.Minute)},
		{name: "just inside default tolerance, future", keys: [][]byte{key}, id: refID, ts: ts, sig: sig, body: body,
			now: now.Add(-5 * time.Minute)},
		{name: "too old for default tolerance", keys: [][]byte{key}, id: refID, ts: ts, sig: sig, body: body,
			now: now.Add(5*time.Minute + time.Second), wantErr: ErrStaleTimestamp},
		{name: "too far in the future", keys: [][]byte{key}, id: refID, ts: ts, sig: sig, body: body,
			now: now.Add(-5*time.Minute - time.Second), wantErr: ErrStaleTimestamp},
		{name: "custom tolerance", keys: [][]byte{key}, id: refID, ts: ts, sig: sig, body: body,
			now: now.Add(2 * time.Second), tolerance: time.Second, wantErr: ErrStaleTimestamp},
		{name: "extreme timestamp", keys: [][]byte{key}, id: refID, ts: "-9223372036854775808", sig: sig, body: body,
			now: now, wantErr: ErrStaleTimestamp},
		{name: "wrong key", keys: [][]byte{other}, id: refID, ts: ts, sig: sig, body: body, now: now, wantErr: ErrBadSignature},
		{name: "no keys", id: refID, ts: ts, sig: sig, body: body, now: now, wantErr: ErrBadSignature},
		{name: "body changed", keys: [][]byte{key}, id: refID, ts: ts, sig: sig, body: []byte(`{"test": 1}`), now: now,
			wantErr: ErrBadSignature},
		{name: "id changed", keys: [][]byte{key}, id: "msg_other", ts: ts, sig: sig, body: body, now: now,
			wantErr: ErrBadSignature},
		{name: "timestamp changed", keys: [][]byte{key}, id: refID, ts: strconv.FormatInt(refTimestamp+1, 10), sig: sig,
			body: body, now: now, wantErr: ErrBadSignature},
		{name: "no v1 prefix", keys: [][]byte{key}, id: refID, ts: ts, sig: strings.TrimPrefix(sig, "v1,"), body: body,
			now: now, wantErr: ErrBadSignature},
		{name: "other scheme only", keys: [][]byte{key}, id: refID, ts: ts, sig: "v2," + strings.TrimPrefix(sig, "v1,"),
			body: body, now: now, wantErr: ErrBadSignature},
		{name: "signature not base64", keys: [][]byte{key}, id: refID, ts: ts, sig: "v1,!!!", body: body, now: now,
			wantErr: ErrBadSignature},
		{name: "truncated signature", keys: [][]byte{key}, id: refID, ts: ts, sig: sig[:len(sig)-8], body: body, now: now,
			wantErr: ErrBadSignature},
		{name: "unused bits of the last base64 character set", keys: [][]byte{key}, id: refID, ts: ts, sig: withUnusedBits(sig),
			body: body, now: now, wantErr: ErrBadSignature},
		{name: "missing id", keys: [][]byte{key}, ts: ts, sig: sig, body: body, now: now, wantErr: ErrMissingHeaders},
		{name: "missing timestamp", keys: [][]byte{key}, id: refID, sig: sig, body: body, now: now, wantErr: ErrMissingHeaders},
		{name: "missing signature", keys: [][]byte{key}, id: refID, ts: ts, body: body, now: now, wantErr: ErrMissingHeaders},
		{name: "timestamp not a number", keys: [][]byte{key}, id: refID, ts: "yesterday", sig: sig, body: body, now: now,
			wantErr: ErrMissingHeaders},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tt.keys, tt.id, tt.ts, tt.sig, tt.body, tt.now, tt.tolerance)
			if tt.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tt.wantErr)
		})
	}
}

// withUnusedBits returns a signature that decodes to the same bytes under
// lenient base64: the two unused low bits of its last character set. Found
// by FuzzSignVerify: a changed header must not pass for the signed one.
func withUnusedBits(sig string) string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	last := len(sig) - 2 // before the "=" of a 32-byte signature
	return sig[:last] + string(alphabet[strings.IndexByte(alphabet, sig[last])|3]) + sig[last+1:]
}

// TestSignFromManyGoroutinesWithManyKeys signs with kept HMAC states from
// many goroutines at once, over more keys than the cache keeps: every
// signature must be the one a fresh HMAC gives, whether its state was idle,
// was made anew, or outlived a reset of the cache.
func TestSignFromManyGoroutinesWithManyKeys(t *testing.T) {
	t.Parallel()

	want := func(key []byte, id string, ts int64, body []byte) string {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(id + "." + strconv.FormatInt(ts, 10) + "." + string(body)))
		return "v1," + base64.StdEncoding.EncodeToString(h.Sum(nil))
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				key := []byte(fmt.Sprintf("key-%d-%d-of-the-test-32-bytes!!", g, i%3))
				id, body := fmt.Sprintf("evt_%d_%d", g, i), []byte(strings.Repeat("b", i))
				if got := Sign(key, id, refTimestamp, body); got != want(key, id, refTimestamp, body) {
					t.Errorf("goroutine %d, signature %d: %s", g, i, got)
					return
				}
			}
		})
	}
	wg.Wait()

	key, err := ParseSecret(refSecret)
	require.NoError(t, err)
	for i := range maxCachedKeys + 1 {
		macs.states([]byte(strconv.Itoa(i)))
	}
	macs.mu.RLock()
	cached := len(macs.keys)
	macs.mu.RUnlock()
	require.LessOrEqual(t, cached, maxCachedKeys, "the cache starts again once full")
	require.Equal(t, refSignature, Sign(key, refID, refTimestamp, []byte(refBody)))
}

// BenchmarkSign measures one signature of a 200-byte body, the cost every
// delivery pays.
func BenchmarkSign(b *testing.B) {
	key, err := ParseSecret(refSecret)
	require.NoError(b, err)
	body := make([]byte, 200)
	b.ReportAllocs()
	for b.Loop() {
		Sign(key, refID, refTimestamp, body)
	}
}
