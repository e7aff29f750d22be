package receiver

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"

	"github.com/relay-dev/relay/internal/testutil"
)

const (
	testSecret  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	otherSecret = "whsec_b3RoZXJvdGhlcm90aGVyb3RoZXJvdGhlcm90aGVy"
)

var testNow = time.Unix(1_700_000_000, 0)

func fixedClock() time.Time { return testNow }

// startReceiver runs a receiver with cfg (output captured, fixed clock) on a
// loopback test server.
func startReceiver(t *testing.T, cfg Config) (*httptest.Server, *testutil.Buffer) {
	t.Helper()
	out := &testutil.Buffer{}
	cfg.Out = out
	if cfg.Clock == nil {
		cfg.Clock = fixedClock
	}
	h, err := NewHandler(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, out
}

// newSender returns relay's own delivery client, allowed to reach loopback.
func newSender(t *testing.T) *deliver.Client {
	t.Helper()
	c, err := deliver.NewClient(deliver.WithAllowPrivate(true), deliver.WithClock(fixedClock))
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

func mustKey(t *testing.T, secret string) []byte {
	t.Helper()
	key, err := deliver.ParseSecret(secret)
	require.NoError(t, err)
	return key
}

// post sends a request by hand, for the cases relay itself would never send.
func post(t *testing.T, url string, header http.Header, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp
}

// signedHeader signs body for id at ts with key, as relay does.
func signedHeader(key []byte, id string, ts time.Time, body []byte) http.Header {
	return http.Header{
		"Webhook-Id":        {id},
		"Webhook-Timestamp": {strconv.FormatInt(ts.Unix(), 10)},
		"Webhook-Signature": {deliver.Sign(key, id, ts.Unix(), body)},
		"Content-Type":      {"application/json"},
	}
}

func TestSignedDeliveryIsAcceptedAndPrinted(t *testing.T) {
	t.Parallel()

	srv, out := startReceiver(t, Config{Secrets: []string{testSecret}})
	body := []byte(`{"id":"evt_01","video_id":"vv_9f31c2"}`)
	o := newSender(t).Send(t.Context(), deliver.Request{
		URL: srv.URL + "/", ID: "evt_01", Body: body, Keys: [][]byte{mustKey(t, testSecret)},
	})
	require.Equal(t, deliver.Delivered, o.Class, "err: %v", o.Err)
	require.Equal(t, http.StatusOK, o.Status)
	require.Empty(t, o.Body)

	require.Equal(t,
		testNow.Format(time.TimeOnly)+" POST /  webhook-id: evt_01  signature: ok  reply: 200\n"+
			"  attempt: 1  size: 38 B  content-type: application/json\n"+
			`  {"id":"evt_01","video_id":"vv_9f31c2"}`+"\n",
		out.String())
}

func TestRotatedSecretsAcceptEither(t *testing.T) {
	t.Parallel()

	srv, out := startReceiver(t, Config{Secrets: []string{otherSecret, testSecret}})
	o := newSender(t).Send(t.Context(), deliver.Request{
		URL: srv.URL, ID: "evt_rot", Body: []byte(`{}`), Keys: [][]byte{mustKey(t, testSecret)},
	})
	require.Equal(t, deliver.Delivered, o.Class)
	require.Contains(t, out.String(), "signature: ok")
}

func TestBadSignatureIsRefused(t *testing.T) {
	t.Parallel()

	body := []byte(`{"id":"evt_bad"}`)
	right, wrong := mustKey(t, testSecret), mustKey(t, otherSecret)

	tests := []struct {
		name   string
		header http.Header
		reason string
	}{
		{name: "wrong key", header: signedHeader(wrong, "evt_bad", testNow, body), reason: "no match"},
		{name: "stale timestamp", header: signedHeader(right, "evt_bad", testNow.Add(-time.Hour), body), reason: "stale timestamp"},
		{name: "unsigned", header: http.Header{"Webhook-Id": {"evt_bad"}}, reason: "missing headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, out := startReceiver(t, Config{Secrets: []string{testSecret}, Status: http.StatusAccepted})
			resp := post(t, srv.URL, tt.header, body)
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a bad signature wins over a forced status")
			printed := out.String()
			require.Contains(t, printed, "signature: bad ("+tt.reason+")")
			require.Contains(t, printed, "reply: 401")
			require.Contains(t, printed, `  {"id":"evt_bad"}`, "a refused delivery is still printed")
		})
	}
}

func TestWithoutSecretsSignaturesAreUnchecked(t *testing.T) {
	t.Parallel()

	srv, out := startReceiver(t, Config{})
	resp := post(t, srv.URL+"/in?x=1", http.Header{"Webhook-Id": {"evt_u"}}, []byte("hello"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t,
		testNow.Format(time.TimeOnly)+" POST /in?x=1  webhook-id: evt_u  signature: unchecked  reply: 200\n"+
			"  attempt: 1  size: 5 B  content-type: (none)\n"+
			"  hello\n",
		out.String())
}

func TestAttemptCountsRepeatedIDs(t *testing.T) {
	t.Parallel()

	srv, out := startReceiver(t, Config{Secrets: []string{testSecret}})
	sender := newSender(t)
	key := mustKey(t, testSecret)
	for _, id := range []string{"evt_a", "evt_a", "evt_b", "evt_a"} {
		o := sender.Send(t.Context(), deliver.Request{URL: srv.URL, ID: id, Body: []byte(`{}`), Keys: [][]byte{key}})
		require.Equal(t, deliver.Delivered, o.Class)
	}
	var got []string
	id := ""
	for line := range strings.Lines(out.String()) {
		if fields := strings.Fields(line); len(fields) > 5 && fields[1] == "POST" {
			id = fields[4]
		}
		if fields := strings.Fields(line); len(fields) > 1 && fields[0] == "attempt:" {
			got = append(got, id+" "+fields[1])
		}
	}
	require.Equal(t, []string{"evt_a 1", "evt_a 2", "evt_b 1", "evt_a 3"}, got)
}

func TestAttemptsMemoryIsBounded(t *testing.T) {
	t.Parallel()

	a := newAttempts(3)
	require.Equal(t, 1, a.add("a"))
	require.Equal(t, 2, a.add("a"))
	require.Equal(t, 1, a.add("b"))
	require.Equal(t, 1, a.add("c"))
	require.Equal(t, 1, a.add("d"), "d pushes out a, the oldest")
	require.Len(t, a.counts, 3)
	require.Equal(t, 1, a.add("a"), "a was forgotten")
	require.Equal(t, 2, a.add("c"))
	require.Len(t, a.counts, 3)
}

func TestForcedStatus(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name           string
		status         int
		retryAfter     string
		wantClass      deliver.Class
		wantRetryAfter time.Duration
		wantHeader     string
	}{
		{name: "429 with Retry-After", status: 429, retryAfter: "30", wantClass: deliver.Retryable,
			wantRetryAfter: 30 * time.Second, wantHeader: "30"},
		{name: "503 with Retry-After", status: 503, retryAfter: "7", wantClass: deliver.Retryable,
			wantRetryAfter: 7 * time.Second, wantHeader: "7"},
		{name: "429 without Retry-After", status: 429, wantClass: deliver.Retryable},
		{name: "410 never sends Retry-After", status: 410, retryAfter: "30", wantClass: deliver.Gone},
		{name: "400", status: 400, wantClass: deliver.Rejected},
		{name: "201", status: 201, wantClass: deliver.Delivered},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, out := startReceiver(t, Config{Secrets: []string{testSecret}, Status: tt.status, RetryAfter: tt.retryAfter})

			resp := post(t, srv.URL, signedHeader(mustKey(t, testSecret), "evt_f", testNow, []byte(`{}`)), []byte(`{}`))
			require.Equal(t, tt.status, resp.StatusCode)
			require.Equal(t, tt.wantHeader, resp.Header.Get("Retry-After"))

			o := newSender(t).Send(t.Context(), deliver.Request{
				URL: srv.URL, ID: "evt_f", Body: []byte(`{}`), Keys: [][]byte{mustKey(t, testSecret)},
			})
			require.Equal(t, tt.wantClass, o.Class)
			require.Equal(t, tt.wantRetryAfter, o.RetryAfter)
			require.Contains(t, out.String(), "attempt: 2  size: 2 B")
			require.Contains(t, out.String(), "reply: "+strconv.Itoa(tt.status))
		})
	}
}

func TestFailRate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		failRate   float64
		roll       float64
		retryAfter string
		want       int
	}{
		{name: "always fails", failRate: 1, roll: 0.999, retryAfter: "5", want: 500},
		{name: "always fails, no Retry-After", failRate: 1, roll: 0, want: 500},
		{name: "roll under the rate fails", failRate: 0.5, roll: 0.3, want: 500},
		{name: "roll over the rate succeeds", failRate: 0.5, roll: 0.7, retryAfter: "5", want: 200},
		{name: "never fails", failRate: 0, roll: 0, retryAfter: "5", want: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, out := startReceiver(t, Config{
				FailRate: tt.failRate, RetryAfter: tt.retryAfter, Rand: func() float64 { return tt.roll },
			})
			resp := post(t, srv.URL, http.Header{"Webhook-Id": {"evt_r"}}, []byte(`{}`))
			require.Equal(t, tt.want, resp.StatusCode)
			if tt.want == http.StatusInternalServerError {
				require.Equal(t, tt.retryAfter, resp.Header.Get("Retry-After"))
			} else {
				require.Empty(t, resp.Header.Values("Retry-After"))
			}
			require.Contains(t, out.String(), "reply: "+strconv.Itoa(tt.want))
		})
	}
}

func TestFailRateWithRealRandomness(t *testing.T) {
	t.Parallel()

	// FailRate 1 must fail whatever the default source of randomness says.
	srv, _ := startReceiver(t, Config{FailRate: 1})
	for range 20 {
		require.Equal(t, http.StatusInternalServerError, post(t, srv.URL, nil, []byte(`{}`)).StatusCode)
	}
}

func TestBodyPreview(t *testing.T) {
	t.Parallel()

	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	long := strings.Repeat("é", 150)        // 300 bytes; 200 falls on a rune boundary
	odd := "x" + strings.Repeat("é\n", 100) // 301 bytes; 200 falls inside a rune
	lines := strings.Repeat("é\n", 100)     // 300 bytes of short lines

	tests := []struct {
		name string
		body []byte
		want string
	}{
		{name: "binary", body: allBytes,
			want: "  (binary, 256 bytes) 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n"},
		{name: "short binary", body: []byte{0xff, 0x00}, want: "  (binary, 2 bytes) ff00\n"},
		{name: "empty", body: nil, want: "  (empty)\n"},
		{name: "a long line is cut to fit 100 columns", body: []byte(long), want: "  " + strings.Repeat("é", 97) + "…\n"},
		{name: "long text is cut at 200 bytes", body: []byte(lines), want: strings.Repeat("  é\n", 66) + "  é…\n"},
		{name: "cut never splits a rune", body: []byte(odd), want: "  xé\n" + strings.Repeat("  é\n", 64) + "  é…\n"},
		{name: "lines are indented", body: []byte("{\n  \"a\": 1\n}\n"), want: "  {\n    \"a\": 1\n  }\n"},
		{name: "terminal escapes are neutralised", body: []byte("hi\x1b[2Jthere\r\x00"), want: "  hi\\x1b[2Jthere\\r\\x00\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, out := startReceiver(t, Config{})
			require.Equal(t, http.StatusOK, post(t, srv.URL, http.Header{"Webhook-Id": {"evt_p"}}, tt.body).StatusCode)
			printed := out.String()
			_, preview, ok := strings.Cut(printed, "\n")
			require.True(t, ok)
			_, preview, ok = strings.Cut(preview, "\n")
			require.True(t, ok)
			require.Equal(t, tt.want, preview)
			require.Contains(t, printed, "size: "+strconv.Itoa(len(tt.body))+" B")
		})
	}
}

func TestHeaderValuesAreNeutralised(t *testing.T) {
	t.Parallel()

	// Go's own server answers 400 to control characters in a header; the
	// handler does not rely on the server in front of it to do so.
	out := &testutil.Buffer{}
	h, err := NewHandler(Config{Out: out})
	require.NoError(t, err)
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/", strings.NewReader(`{}`))
	req.Header.Set("Webhook-Id", "evt\x1b[31m")
	req.Header.Set("Content-Type", "text/\x1b]0;pwned\x07")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)

	require.Contains(t, out.String(), `webhook-id: evt\x1b[31m  `)
	require.Contains(t, out.String(), `content-type: text/\x1b]0;pwned\a`+"\n")
	require.NotContains(t, out.String(), "\x1b")
	require.NotContains(t, out.String(), "\a")
}

func TestOnlyPostIsPrinted(t *testing.T) {
	t.Parallel()

	srv, out := startReceiver(t, Config{})
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Equal(t, http.MethodPost, resp.Header.Get("Allow"))
	require.Empty(t, out.String())
}

func TestDelayEndsWithTheRequest(t *testing.T) {
	t.Parallel()

	out := &testutil.Buffer{}
	h, err := NewHandler(Config{Delay: time.Hour, Out: out})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/", strings.NewReader(`{}`))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req) // returns at once: the request is already cancelled
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, "an abandoned delay never claims success")
	require.Contains(t, out.String(), "reply: 200 after 1h0m0s")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero value", cfg: Config{}},
		{name: "everything set", cfg: Config{Secrets: []string{testSecret, otherSecret}, Status: 503, FailRate: 0.25,
			RetryAfter: "30", Delay: time.Second}},
		{name: "status 100", cfg: Config{Status: 100}},
		{name: "status 599", cfg: Config{Status: 599}},
		{name: "fail rate 1", cfg: Config{FailRate: 1}},
		{name: "retry-after as a date", cfg: Config{RetryAfter: "Wed, 21 Oct 2015 07:28:00 GMT"}},
		{name: "bad secret", cfg: Config{Secrets: []string{testSecret, "hunter2"}}, wantErr: "--secret"},
		{name: "short secret", cfg: Config{Secrets: []string{"whsec_c2hvcnQ="}}, wantErr: "--secret"},
		{name: "status 99", cfg: Config{Status: 99}, wantErr: "--status must be 100-599"},
		{name: "status 600", cfg: Config{Status: 600}, wantErr: "--status must be 100-599"},
		{name: "negative status", cfg: Config{Status: -1}, wantErr: "--status must be 100-599"},
		{name: "negative fail rate", cfg: Config{FailRate: -0.1}, wantErr: "--fail-rate must be between 0 and 1"},
		{name: "fail rate above 1", cfg: Config{FailRate: 1.5}, wantErr: "--fail-rate must be between 0 and 1"},
		{name: "NaN fail rate", cfg: Config{FailRate: math.NaN()}, wantErr: "--fail-rate must be between 0 and 1"},
		{name: "bad retry-after", cfg: Config{RetryAfter: "soon"}, wantErr: "--retry-after must be seconds or an HTTP date"},
		{name: "negative delay", cfg: Config{Delay: -time.Second}, wantErr: "--delay must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			h, herr := NewHandler(tt.cfg)
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, herr)
				require.NotNil(t, h)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tt.wantErr)
			require.NotContains(t, err.Error(), "hunter2", "a secret is never echoed")
			require.ErrorIs(t, herr, ErrInvalidConfig)
			require.Nil(t, h)
		})
	}

	t.Run("bad secret wraps the deliver error", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, Config{Secrets: []string{"nope"}}.Validate(), deliver.ErrInvalidSecret)
	})
}

func TestServe(t *testing.T) {
	t.Parallel()

	// printed lets the test know a delayed request has reached the handler.
	printed := make(chan struct{}, 1)
	out := writerFunc(func(p []byte) (int, error) {
		printed <- struct{}{}
		return len(p), nil
	})
	h, err := NewHandler(Config{Delay: time.Hour, Out: out})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	addrs := make(chan net.Addr, 1)
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, "127.0.0.1:0", h, func(a net.Addr) { addrs <- a }) }()
	addr := <-addrs

	type reply struct {
		status int
		err    error
	}
	replies := make(chan reply, 1)
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	go func() {
		resp, err := client.Post("http://"+addr.String()+"/", "application/json", strings.NewReader(`{}`))
		if err != nil {
			replies <- reply{err: err}
			return
		}
		_ = resp.Body.Close()
		replies <- reply{status: resp.StatusCode}
	}()

	<-printed // the request is inside its hour-long delay
	cancel()
	require.NoError(t, <-served, "a cancelled context is a clean stop")
	r := <-replies
	require.NoError(t, r.err)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "shutdown cuts the delay short")
}

func TestServeReportsListenErrors(t *testing.T) {
	t.Parallel()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })

	err = Serve(t.Context(), ln.Addr().String(), http.NotFoundHandler(), func(net.Addr) {
		t.Error("ready must not be called when listening failed")
	})
	require.ErrorContains(t, err, ln.Addr().String())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// relay listen --public-key verifies v1a: a request signed with the
// matching ed25519 key is accepted, one signed with another key refused;
// with a secret beside it, either kind of signature is enough.
func TestPublicKeyVerifiesV1a(t *testing.T) {
	t.Parallel()

	signingKey, err := deliver.NewSigningKey()
	require.NoError(t, err)
	otherKey, err := deliver.NewSigningKey()
	require.NoError(t, err)
	public, err := deliver.PublicKey(signingKey)
	require.NoError(t, err)
	priv := func(s string) ed25519.PrivateKey {
		key, err := deliver.ParseSigningKey(s)
		require.NoError(t, err)
		return key
	}

	for _, cfg := range []Config{{PublicKeys: []string{public}}, {Secrets: []string{testSecret}, PublicKeys: []string{public}}} {
		srv, out := startReceiver(t, cfg)
		send := func(r deliver.Request) deliver.Outcome {
			r.URL, r.Body = srv.URL, []byte(`{}`)
			return newSender(t).Send(t.Context(), r)
		}
		o := send(deliver.Request{ID: "evt_ok", SigningKeys: []ed25519.PrivateKey{priv(signingKey)}})
		require.Equal(t, deliver.Delivered, o.Class, "err: %v", o.Err)
		o = send(deliver.Request{ID: "evt_other", SigningKeys: []ed25519.PrivateKey{priv(otherKey)}})
		require.Equal(t, http.StatusUnauthorized, o.Status)
		require.Contains(t, out.String(), "signature: bad (no match)")
		o = send(deliver.Request{ID: "evt_v1", Keys: [][]byte{mustKey(t, testSecret)}})
		if len(cfg.Secrets) > 0 {
			require.Equal(t, deliver.Delivered, o.Class, "a v1 signature is enough when a secret is given")
		} else {
			require.Equal(t, http.StatusUnauthorized, o.Status, "a v1 signature is no v1a signature")
		}
	}

	_, err = NewHandler(Config{PublicKeys: []string{signingKey}})
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "--public-key")
	require.NotContains(t, err.Error(), signingKey[5:20], "no error quotes a key")
}
