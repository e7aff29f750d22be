package subscribers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/relay-dev/relay/internal/deliver"
)

// Secrets for tests: the base64 of 32, 16 and 65 bytes.
var (
	secretA  = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xA1}, 32))
	secretB  = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xB2}, 24))
	shortKey = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xC3}, 16))
	longKey  = "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0xD4}, 65))
)

// valid returns a subscriber that passes Validate, for tests to spoil.
func valid(id string) Subscriber {
	s := Subscriber{
		ID:      id,
		URL:     "https://hooks.example.com/relay",
		Secrets: []string{secretA},
		Events:  []string{"video.*", "order.shipped"},
		Rate:    5,
		Headers: map[string]string{"Authorization": "Bearer hunter2", "X-Team": "blue-team"},
	}
	s.SetDefaults()
	return s
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		modify func(*Subscriber)
		flag   string // "" when valid
		want   string // part of the message
	}{
		{"valid", func(*Subscriber) {}, "", ""},
		{"id of 64", func(s *Subscriber) { s.ID = strings.Repeat("a", 64) }, "", ""},
		{"id with every allowed kind", func(s *Subscriber) { s.ID = "Az09_-" }, "", ""},
		{"id empty", func(s *Subscriber) { s.ID = "" }, "ID", `1 to 64 characters from A-Z a-z 0-9 _ -, got ""`},
		{"id of 65", func(s *Subscriber) { s.ID = strings.Repeat("a", 65) }, "ID", "1 to 64 characters"},
		{"id with dot", func(s *Subscriber) { s.ID = "a.b" }, "ID", `got "a.b"`},
		{"id with wildcard", func(s *Subscriber) { s.ID = "a*" }, "ID", `got "a*"`},
		{"id with space", func(s *Subscriber) { s.ID = "a b" }, "ID", `got "a b"`},
		{"id not ascii", func(s *Subscriber) { s.ID = "café" }, "ID", `got "café"`},

		{"url http", func(s *Subscriber) { s.URL = "http://localhost:9000/hook" }, "", ""},
		{"url ftp", func(s *Subscriber) { s.URL = "ftp://x" }, "--url", `must be an http or https URL with a host, got "ftp://x"`},
		{"url empty", func(s *Subscriber) { s.URL = "" }, "--url", `got ""`},
		{"url relative", func(s *Subscriber) { s.URL = "/hook" }, "--url", `got "/hook"`},
		{"url without host", func(s *Subscriber) { s.URL = "https://" }, "--url", "with a host"},
		{"url with port only", func(s *Subscriber) { s.URL = "http://:80/x" }, "--url", "with a host"},
		{"url opaque", func(s *Subscriber) { s.URL = "http:example.com" }, "--url", "with a host"},
		{"url unparsable", func(s *Subscriber) { s.URL = "http://exa mple.com" }, "--url", "with a host"},
		{"url with user", func(s *Subscriber) { s.URL = "https://bob:pw@x.example/" }, "--url", "must not contain a user or password"},

		{"two secrets", func(s *Subscriber) { s.Secrets = []string{secretA, secretB} }, "", ""},
		{"no secret", func(s *Subscriber) { s.Secrets = nil }, "--secret", "at least one secret is required"},
		{"secret without prefix", func(s *Subscriber) { s.Secrets = []string{strings.TrimPrefix(secretA, "whsec_")} }, "--secret", "whsec_"},
		{"secret not base64", func(s *Subscriber) { s.Secrets = []string{"whsec_!!!!"} }, "--secret", "whsec_"},
		{"secret too short", func(s *Subscriber) { s.Secrets = []string{shortKey} }, "--secret", "16 bytes"},
		{"secret too long", func(s *Subscriber) { s.Secrets = []string{longKey} }, "--secret", "65 bytes"},
		{"second secret bad", func(s *Subscriber) { s.Secrets = []string{secretA, shortKey} }, "--secret", "secret 2 of 2"},

		{"no filters", func(s *Subscriber) { s.Events = nil }, "", ""},
		{"filter empty", func(s *Subscriber) { s.Events = []string{""} }, "--events", "must not be empty"},
		{"filter empty token", func(s *Subscriber) { s.Events = []string{"video..x"} }, "--events", "empty tokens"},
		{"filter partial wildcard", func(s *Subscriber) { s.Events = []string{"video.tr*"} }, "--events", "whole tokens"},
		{"filter > not last", func(s *Subscriber) { s.Events = []string{"video.>.x"} }, "--events", "> must be the last token"},
		{"second filter bad", func(s *Subscriber) { s.Events = []string{"video.*", "a b"} }, "--events", "spaces"},

		{"rate unlimited", func(s *Subscriber) { s.Rate, s.Burst = 0, 0 }, "", ""},
		{"rate fractional", func(s *Subscriber) { s.Rate, s.Burst = 0.5, 1 }, "", ""},
		{"rate negative", func(s *Subscriber) { s.Rate = -1 }, "--rate", "0 (unlimited) or a number of requests per second from 0.001 to 1000000, got -1"},
		{"rate too low", func(s *Subscriber) { s.Rate = 1e-9 }, "--rate", "from 0.001 to 1000000, got 1e-09"},
		{"rate NaN", func(s *Subscriber) { s.Rate = math.NaN() }, "--rate", "got NaN"},
		{"rate infinite", func(s *Subscriber) { s.Rate = math.Inf(1) }, "--rate", "got +Inf"},
		{"rate too high", func(s *Subscriber) { s.Rate = 2e6 }, "--rate", "to 1000000"},
		{"burst negative", func(s *Subscriber) { s.Burst = -1 }, "--burst", "must be 0 or more, got -1"},
		{"burst zero with rate", func(s *Subscriber) { s.Burst = 0 }, "--burst", "at least 1 when --rate is above 0, got 0"},

		{"max attempts 1", func(s *Subscriber) { s.MaxAttempts = 1 }, "", ""},
		{"max attempts 1000", func(s *Subscriber) { s.MaxAttempts = 1000 }, "", ""},
		{"max attempts 0", func(s *Subscriber) { s.MaxAttempts = 0 }, "--max-attempts", "from 1 to 1000, got 0"},
		{"max attempts 1001", func(s *Subscriber) { s.MaxAttempts = 1001 }, "--max-attempts", "got 1001"},

		{"timeout 5m", func(s *Subscriber) { s.Timeout = Duration(5 * time.Minute) }, "", ""},
		{"timeout 0", func(s *Subscriber) { s.Timeout = 0 }, "--timeout", "above 0 and at most 5m0s, got 0s"},
		{"timeout negative", func(s *Subscriber) { s.Timeout = Duration(-time.Second) }, "--timeout", "got -1s"},
		{"timeout over 5m", func(s *Subscriber) { s.Timeout = Duration(5*time.Minute + 1) }, "--timeout", "at most 5m0s"},

		{"retry base 0", func(s *Subscriber) { s.RetryBase = 0 }, "--retry-base", "above 0, got 0s"},
		{"retry base negative", func(s *Subscriber) { s.RetryBase = Duration(-time.Second) }, "--retry-base", "got -1s"},
		{"retry max equal to base", func(s *Subscriber) { s.RetryMax = s.RetryBase }, "", ""},
		{"retry max below base", func(s *Subscriber) { s.RetryMax = Duration(time.Second) }, "--retry-max", "at least --retry-base (5s), got 1s"},

		{"max in flight 1024", func(s *Subscriber) { s.MaxInFlight = 1024 }, "", ""},
		{"max in flight 0", func(s *Subscriber) { s.MaxInFlight = 0 }, "--max-in-flight", "from 1 to 1024, got 0"},
		{"max in flight 1025", func(s *Subscriber) { s.MaxInFlight = 1025 }, "--max-in-flight", "got 1025"},
		{"breaker failure rate 1.5", func(s *Subscriber) { s.BreakerFailureRate = 1.5 }, "--breaker-failure-rate", "at most 1, such as 0.5, got 1.5"},
		{"breaker failure rate NaN", func(s *Subscriber) { s.BreakerFailureRate = math.NaN() }, "--breaker-failure-rate", "got NaN"},
		{"breaker window 100ms", func(s *Subscriber) { s.BreakerWindow = Duration(100 * time.Millisecond) }, "--breaker-window", "from 1s to 10m0s, got 100ms"},
		{"breaker window 1h", func(s *Subscriber) { s.BreakerWindow = Duration(time.Hour) }, "--breaker-window", "got 1h"},
		{"breaker min requests -1", func(s *Subscriber) { s.BreakerMinRequests = -1 }, "--breaker-min-requests", "from 1 to 100000, got -1"},
		{"breaker consecutive 100001", func(s *Subscriber) { s.BreakerConsecutive = 100_001 }, "--breaker-consecutive", "got 100001"},

		{"header empty value", func(s *Subscriber) { s.Headers = map[string]string{"X-Empty": ""} }, "", ""},
		{"header name with space", func(s *Subscriber) { s.Headers = map[string]string{"X Y": "v"} }, "--header", `HTTP token`},
		{"header name empty", func(s *Subscriber) { s.Headers = map[string]string{"": "v"} }, "--header", "empty name"},
		{"header webhook-id", func(s *Subscriber) { s.Headers = map[string]string{"webhook-id": "v"} }, "--header", `"webhook-id" is set by relay`},
		{"header Webhook-Signature", func(s *Subscriber) { s.Headers = map[string]string{"Webhook-Signature": "v"} }, "--header", "Webhook-Signature"},
		{"header content-type", func(s *Subscriber) { s.Headers = map[string]string{"Content-Type": "text/plain"} }, "--header", "Content-Type"},
		{"header host", func(s *Subscriber) { s.Headers = map[string]string{"Host": "evil"} }, "--header", "Host"},
		{"header content-length", func(s *Subscriber) { s.Headers = map[string]string{"content-length": "1"} }, "--header", "content-length"},
		{"header transfer-encoding", func(s *Subscriber) { s.Headers = map[string]string{"Transfer-Encoding": "chunked"} }, "--header", "Transfer-Encoding"},
		{"header value with CRLF", func(s *Subscriber) { s.Headers = map[string]string{"X-A": "a\r\nX-B: b"} }, "--header", `value of "X-A" must not contain CR, LF`},
		{"header value with LF", func(s *Subscriber) { s.Headers = map[string]string{"X-A": "a\nb"} }, "--header", "CR, LF"},
		{"header twice", func(s *Subscriber) { s.Headers = map[string]string{"X-A": "1", "x-a": "2"} }, "--header", "same header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := valid("sub-1")
			tt.modify(&s)
			err := s.Validate()
			if tt.flag == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalid)
			var ve *ValidationError
			require.ErrorAs(t, err, &ve)
			require.Equal(t, tt.flag, ve.Flag)
			require.True(t, strings.HasPrefix(err.Error(), tt.flag+": "), "message %q does not start with the flag", err)
			require.Contains(t, err.Error(), tt.want)
			require.NotContains(t, err.Error(), "\n", "the message must be one line")
			for _, sec := range s.Secrets {
				if len(sec) > len("whsec_") {
					require.NotContains(t, err.Error(), sec, "a secret must never appear in an error")
				}
			}
			for _, v := range s.Headers {
				if len(v) > 1 {
					require.NotContains(t, err.Error(), v, "a header value must never appear in an error")
				}
			}
			require.NotContains(t, err.Error(), ":pw@", "a URL password must never appear in an error")
		})
	}
}

func TestValidateSecretErrorWrapsDeliver(t *testing.T) {
	t.Parallel()
	s := valid("a")
	s.Secrets = []string{shortKey}
	err := s.Validate()
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, deliver.ErrInvalidSecret)
}

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id string
		ok bool
	}{
		{"a", true},
		{"order-service_2", true},
		{strings.Repeat("Z", 64), true},
		{"", false},
		{strings.Repeat("Z", 65), false},
		{"a.b", false},
		{"a>", false},
		{"a/b", false},
		{" a", false},
	}
	for _, tt := range tests {
		err := ValidateID(tt.id)
		if tt.ok {
			require.NoError(t, err, "id %q", tt.id)
			continue
		}
		require.ErrorIs(t, err, ErrInvalid, "id %q", tt.id)
		require.True(t, strings.HasPrefix(err.Error(), "ID: "), "%q", err)
	}
}

func TestSetDefaults(t *testing.T) {
	t.Parallel()
	var s Subscriber
	s.SetDefaults()
	require.Equal(t, Subscriber{
		MaxAttempts: 12,
		Timeout:     Duration(10 * time.Second),
		RetryBase:   Duration(5 * time.Second),
		RetryMax:    Duration(time.Hour),
		MaxInFlight: 16,
		MaxBacklog:  DefaultMaxBacklog,

		BreakerFailureRate: DefaultBreakerFailureRate,
		BreakerMinRequests: DefaultBreakerMinRequests,
		BreakerWindow:      Duration(DefaultBreakerWindow),
		BreakerConsecutive: DefaultBreakerConsecutive,
	}, s, "rate 0 is unlimited and needs no burst")

	tests := []struct {
		rate  float64
		burst int
		want  int
	}{
		{rate: 50, want: 50},
		{rate: 2.5, want: 3},
		{rate: 0.2, want: 1},
		{rate: 50, burst: 7, want: 7},
		{rate: -1, want: 0}, // left for Validate to refuse
		{rate: math.NaN(), want: 0},
	}
	for _, tt := range tests {
		s := Subscriber{Rate: tt.rate, Burst: tt.burst}
		s.SetDefaults()
		require.Equal(t, tt.want, s.Burst, "rate %v burst %d", tt.rate, tt.burst)
	}

	// Set fields, even invalid ones, are kept.
	s = Subscriber{MaxAttempts: -3, Timeout: Duration(time.Second), RetryBase: 1, RetryMax: 2, MaxInFlight: 2}
	s.SetDefaults()
	require.Equal(t, -3, s.MaxAttempts)
	require.Equal(t, Duration(time.Second), s.Timeout)
	require.Equal(t, Duration(1), s.RetryBase)
	require.Equal(t, Duration(2), s.RetryMax)
	require.Equal(t, 2, s.MaxInFlight)
}

func TestParseHeader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in          string
		name, value string
		err         string // part of the message; "" when valid
	}{
		{in: "Authorization: Bearer abc", name: "Authorization", value: "Bearer abc"},
		{in: "X-A:b", name: "X-A", value: "b"},
		{in: "  X-A :  b c \t", name: "X-A", value: "b c"},
		{in: "X-Empty:", name: "X-Empty", value: ""},
		{in: "X-Url: http://a:b", name: "X-Url", value: "http://a:b"},
		{in: "Bearer-only-token", err: `must be "Name: value"`},
		{in: ": v", err: "empty name"},
		{in: "X Y: v", err: "HTTP token"},
		{in: "webhook-timestamp: 1", err: "set by relay"},
		{in: "content-type: text/plain", err: "set by relay"},
		{in: "X-A: a\rb", err: "CR, LF"},
		{in: "X-A: a\x00b", err: "control characters"},
	}
	for _, tt := range tests {
		name, value, err := ParseHeader(tt.in)
		if tt.err == "" {
			require.NoError(t, err, "%q", tt.in)
			require.Equal(t, tt.name, name, "%q", tt.in)
			require.Equal(t, tt.value, value, "%q", tt.in)
			continue
		}
		require.ErrorIs(t, err, ErrInvalid, "%q", tt.in)
		require.True(t, strings.HasPrefix(err.Error(), "--header: "), "%q", err)
		require.Contains(t, err.Error(), tt.err, "%q", tt.in)
	}

	_, _, err := ParseHeader("Bearer sekrit-token")
	require.NotContains(t, err.Error(), "sekrit", "a header value is never repeated")
}

func TestKeys(t *testing.T) {
	t.Parallel()
	s := valid("a")
	s.Secrets = []string{secretA, secretB}
	keys, err := s.Keys(time.Now())
	require.NoError(t, err)
	require.Equal(t, [][]byte{bytes.Repeat([]byte{0xA1}, 32), bytes.Repeat([]byte{0xB2}, 24)}, keys)

	s.Secrets = []string{secretA, "whsec_nope"}
	_, err = s.Keys(time.Now())
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, deliver.ErrInvalidSecret)
	require.Contains(t, err.Error(), "secret 2 of 2")

	// A previous secret signs until its grace ends, after the active ones.
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s.Secrets = []string{secretA}
	s.PreviousSecrets = []PreviousSecret{{Secret: secretB, Until: end}}
	require.NoError(t, s.Validate())
	keys, err = s.Keys(end.Add(-time.Second))
	require.NoError(t, err)
	require.Equal(t, [][]byte{bytes.Repeat([]byte{0xA1}, 32), bytes.Repeat([]byte{0xB2}, 24)}, keys)
	keys, err = s.Keys(end)
	require.NoError(t, err)
	require.Equal(t, [][]byte{bytes.Repeat([]byte{0xA1}, 32)}, keys)

	s.PreviousSecrets = []PreviousSecret{{Secret: "whsec_nope", Until: end}}
	require.ErrorIs(t, s.Validate(), ErrInvalid)
	require.Contains(t, s.Validate().Error(), "previous secret 1 of 1")
	s.PreviousSecrets = []PreviousSecret{{Secret: secretB}}
	require.ErrorIs(t, s.Validate(), ErrInvalid, "a previous secret needs the end of its grace")
}

func TestRedacted(t *testing.T) {
	t.Parallel()
	s := valid("a")
	s.Secrets = []string{secretA, secretB}
	s.Headers = map[string]string{"Authorization": "Bearer hunter2", "X-Api-Key": "k-123456", "X-Team": "blue-team"}

	r := s.Redacted()
	out, err := json.Marshal(r)
	require.NoError(t, err)
	text := string(out) + " " + strings.Join(r.Secrets, " ")
	for _, sec := range s.Secrets {
		require.NotContains(t, text, sec)
		require.NotContains(t, text, strings.TrimPrefix(sec, "whsec_"))
	}
	require.Len(t, r.Secrets, 2)
	for i, masked := range r.Secrets {
		require.Equal(t, deliver.MaskSecret(s.Secrets[i]), masked)
	}
	require.NotContains(t, text, "hunter2")
	require.NotContains(t, text, "k-123456")
	require.Equal(t, "blue-team", r.Headers["X-Team"], "harmless headers stay readable")
	require.Equal(t, s.URL, r.URL)

	// The copy shares nothing with the original.
	r.Secrets[0] = "changed"
	r.Headers["X-Team"] = "changed"
	r.Events[0] = "changed"
	require.Equal(t, secretA, s.Secrets[0])
	require.Equal(t, "blue-team", s.Headers["X-Team"])
	require.Equal(t, "video.*", s.Events[0])
}

func TestDurationJSON(t *testing.T) {
	t.Parallel()
	out, err := json.Marshal(Duration(10 * time.Second))
	require.NoError(t, err)
	require.JSONEq(t, `"10s"`, string(out))

	tests := []struct {
		in   string
		want Duration
		err  bool
	}{
		{in: `"1m30s"`, want: Duration(90 * time.Second)},
		{in: `"250ms"`, want: Duration(250 * time.Millisecond)},
		{in: `1000000000`, want: Duration(time.Second)},
		{in: `null`, want: Duration(7)}, // unchanged
		{in: `"ten seconds"`, err: true},
		{in: `1.5`, err: true},
		{in: `true`, err: true},
	}
	for _, tt := range tests {
		d := Duration(7)
		err := json.Unmarshal([]byte(tt.in), &d)
		if tt.err {
			require.Error(t, err, tt.in)
			continue
		}
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, d, tt.in)
	}
}

func TestSubscriberJSON(t *testing.T) {
	t.Parallel()
	s := valid("a")
	s.CreatedAt = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	s.UpdatedAt = s.CreatedAt.Add(time.Hour)
	out, err := json.Marshal(s)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(out, &fields))
	require.Equal(t, "10s", fields["timeout"])
	require.Equal(t, "5s", fields["retry_base"])
	require.Equal(t, "1h0m0s", fields["retry_max"])
	require.Equal(t, "2025-01-02T03:04:05.000000006Z", fields["created_at"])
	require.NotContains(t, fields, "disabled", "false flags are left out")
	require.NotContains(t, fields, "paused")
	require.NotContains(t, fields, "paused_until")
	require.NotContains(t, fields, "previous_secrets")

	var back Subscriber
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, s, back)

	s.Paused, s.PausedUntil = true, s.UpdatedAt.Add(time.Hour)
	s.PreviousSecrets = []PreviousSecret{{Secret: secretB, Until: s.UpdatedAt.Add(24 * time.Hour)}}
	out, err = json.Marshal(s)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(out, &fields))
	require.Equal(t, true, fields["paused"])
	require.Equal(t, "2025-01-02T05:04:05.000000006Z", fields["paused_until"])
	require.Equal(t, []any{map[string]any{"secret": secretB, "until": "2025-01-03T04:04:05.000000006Z"}}, fields["previous_secrets"])
	back = Subscriber{}
	require.NoError(t, json.Unmarshal(out, &back))
	require.Equal(t, s, back)
}

func TestValidationErrorUnwrap(t *testing.T) {
	t.Parallel()
	cause := errors.New("cause")
	err := error(&ValidationError{Flag: "--x", Msg: "must be y", Err: cause})
	require.Equal(t, "--x: must be y", err.Error())
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, err, cause)
	require.NotErrorIs(t, err, ErrNotFound)
}

// BenchmarkKeys is the signing keys of one request: every delivery asks.
func BenchmarkKeys(b *testing.B) {
	s := valid("a")
	s.Secrets = []string{secretA}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.Keys(now); err != nil {
			b.Fatal(err)
		}
	}
}

// TestValidateRetryStatus: --retry-status takes only statuses that are
// final by default; the rest exits 2 saying why.
func TestValidateRetryStatus(t *testing.T) {
	t.Parallel()
	for _, codes := range [][]int{nil, {401}, {401, 403, 404}, {400, 409, 422, 499}} {
		require.NoError(t, ValidateRetryStatus(codes), "%v", codes)
	}
	for _, tt := range []struct {
		codes []int
		msg   string
	}{
		{[]int{401, 429}, "--retry-status: 429 is retried already"},
		{[]int{408}, "--retry-status: 408 is retried already"},
		{[]int{503}, "--retry-status: 503 is retried already"},
		{[]int{410}, "--retry-status: 410 Gone disables the subscriber"},
		{[]int{200}, "--retry-status: must be 4xx statuses that are final by default, such as 401,403,404, got 200"},
		{[]int{302}, "got 302"},
	} {
		err := ValidateRetryStatus(tt.codes)
		require.ErrorIs(t, err, ErrInvalid, "%v", tt.codes)
		require.Contains(t, err.Error(), tt.msg)
		s := valid("a")
		s.RetryStatus = tt.codes
		require.Error(t, s.Validate(), "Validate calls the same rule: %v", tt.codes)
	}
	s := valid("a")
	s.RetryStatus = []int{404, 401, 404}
	s.SetDefaults()
	require.Equal(t, []int{401, 404}, s.RetryStatus, "sorted, without duplicates")
	require.True(t, s.Retries(401))
	require.False(t, s.Retries(403))
}

// TestSetRateMovesABurstNeverGiven: a burst taken from the rate follows
// it; one given with --burst stays.
func TestSetRateMovesABurstNeverGiven(t *testing.T) {
	t.Parallel()
	s := Subscriber{Rate: 50}
	s.SetDefaults()
	require.Equal(t, 50, s.Burst)
	followed, was := s.SetRate(5)
	s.SetDefaults()
	require.True(t, followed)
	require.Equal(t, 50, was)
	require.Equal(t, 5, s.Burst)

	s = Subscriber{Rate: 50}
	s.SetBurst(50)
	s.SetDefaults()
	followed, _ = s.SetRate(5)
	s.SetDefaults()
	require.False(t, followed, "--burst was given, even equal to the rate")
	require.Equal(t, 50, s.Burst)

	s.SetBurst(0) // the rate's again
	s.SetDefaults()
	require.Equal(t, 5, s.Burst)
	followed, _ = s.SetRate(20)
	s.SetDefaults()
	require.True(t, followed)
	require.Equal(t, 20, s.Burst)

	s = Subscriber{Rate: 50, Burst: 80} // stored before BurstGiven: not the rate's
	followed, _ = s.SetRate(5)
	s.SetDefaults()
	require.False(t, followed)
	require.Equal(t, 80, s.Burst)
}
