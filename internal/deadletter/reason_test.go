package deadletter

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want Reason
		ok   bool
	}{
		{"gone", Gone, true},
		{"rejected", Rejected, true},
		{"refused", Refused, true},
		{"max_attempts", MaxAttempts, true},
		{"deadline", Deadline, true},
		{"expired", Expired, true},
		{"body_lost", BodyLost, true},
		{"", "", false},
		{"nope", "", false},
		{"Gone", "", false},
		{"max-attempts", "", false},
		{" gone", "", false},
		{"*", "", false},
		{"gone.x", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := ParseReason(tt.in)
			if tt.ok {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				return
			}
			require.ErrorIs(t, err, ErrInvalidReason)
			for _, r := range Reasons() {
				require.Contains(t, err.Error(), string(r), "the error lists every valid reason")
			}
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

func TestReasonsIsACopy(t *testing.T) {
	t.Parallel()
	rs := Reasons()
	require.Len(t, rs, 10)
	rs[0] = "changed"
	require.Equal(t, Gone, Reasons()[0])
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"subject", Subject("demo", MaxAttempts), "dlq.demo.max_attempts"},
		{"filter all", Filter{}.Subject(), "dlq.*.*"},
		{"filter subscriber", Filter{Subscriber: "demo"}.Subject(), "dlq.demo.*"},
		{"filter reason", Filter{Reason: Gone}.Subject(), "dlq.*.gone"},
		{"filter both", Filter{Subscriber: "demo", Reason: Gone}.Subject(), "dlq.demo.gone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, tt.got)
		})
	}
}
