package deliver

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		value  string
		want   time.Duration
		wantOK bool
	}{
		{name: "seconds", value: "120", want: 120 * time.Second, wantOK: true},
		{name: "zero", value: "0", want: 0, wantOK: true},
		{name: "surrounding spaces", value: " 7 ", want: 7 * time.Second, wantOK: true},
		{name: "negative is now", value: "-5", want: 0, wantOK: true},
		{name: "huge is clamped", value: "99999999999999999999999", want: time.Duration(math.MaxInt64 / int64(time.Second) * int64(time.Second)), wantOK: true},
		{name: "hugely negative is now", value: "-99999999999999999999999", want: 0, wantOK: true},
		{name: "HTTP date", value: now.Add(90 * time.Second).Format(http.TimeFormat), want: 90 * time.Second, wantOK: true},
		{name: "RFC 850 date", value: now.Add(time.Hour).Format(time.RFC850), want: time.Hour, wantOK: true},
		{name: "ANSI C date", value: now.Add(time.Minute).Format(time.ANSIC), want: time.Minute, wantOK: true},
		{name: "date in the past is now", value: now.Add(-time.Hour).Format(http.TimeFormat), want: 0, wantOK: true},
		{name: "empty", value: ""},
		{name: "blank", value: "   "},
		{name: "fraction", value: "1.5"},
		{name: "plus sign", value: "+5"},
		{name: "minus only", value: "-"},
		{name: "unit", value: "5s"},
		{name: "garbage", value: "soon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseRetryAfter(tt.value, now)
			require.Equal(t, tt.wantOK, ok)
			require.Equal(t, tt.want, got)
		})
	}
}
