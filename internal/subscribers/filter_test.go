package subscribers

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestValidateFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		filter string
		err    string // part of the message; "" when valid
	}{
		{filter: "video"},
		{filter: "video.trending"},
		{filter: "video.*"},
		{filter: "*.created"},
		{filter: "*"},
		{filter: ">"},
		{filter: "video.>"},
		{filter: "*.*.>"},
		{filter: "order-v2.shipped_late"},
		{filter: "", err: "must not be empty"},
		{filter: ".", err: "empty tokens"},
		{filter: ".video", err: "empty tokens"},
		{filter: "video.", err: "empty tokens"},
		{filter: "video..x", err: "empty tokens"},
		{filter: "vid*", err: "whole tokens"},
		{filter: "video.>x", err: "whole tokens"},
		{filter: "video.**", err: "whole tokens"},
		{filter: ">.video", err: "> must be the last token"},
		{filter: "video.>.x", err: "> must be the last token"},
		{filter: "video trending", err: "spaces"},
		{filter: "video.\ttrending", err: "spaces"},
		{filter: "video\n", err: "control characters"},
	}
	for _, tt := range tests {
		err := ValidateFilter(tt.filter)
		if tt.err == "" {
			require.NoError(t, err, "%q", tt.filter)
			continue
		}
		require.ErrorIs(t, err, ErrInvalid, "%q", tt.filter)
		require.True(t, strings.HasPrefix(err.Error(), "--events: "), "%q", err)
		require.Contains(t, err.Error(), tt.err, "%q", tt.filter)
		require.NotContains(t, err.Error(), "\n", "one line")
	}
}

func TestMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		filters []string
		event   string
		want    bool
	}{
		{nil, "anything.at.all", true},
		{[]string{}, "video", true},

		{[]string{"video.trending"}, "video.trending", true},
		{[]string{"video.trending"}, "video.trending.x", false},
		{[]string{"video.trending"}, "video", false},
		{[]string{"video.trending"}, "video.trend", false},

		{[]string{"video.*"}, "video.trending", true},
		{[]string{"video.*"}, "video.a.b", false},
		{[]string{"video.*"}, "video", false},
		{[]string{"video.*"}, "videos.trending", false},
		{[]string{"*.created"}, "order.created", true},
		{[]string{"*.created"}, "order.updated", false},
		{[]string{"*"}, "video", true},
		{[]string{"*"}, "video.a", false},

		{[]string{"video.>"}, "video.a", true},
		{[]string{"video.>"}, "video.a.b", true},
		{[]string{"video.>"}, "video", false},
		{[]string{"video.>"}, "audio.a", false},
		{[]string{"*.>"}, "a.b.c", true},
		{[]string{"*.>"}, "a", false},

		{[]string{">"}, "video", true},
		{[]string{">"}, "a.b.c.d", true},

		{[]string{"video.*", "order.shipped"}, "order.shipped", true},
		{[]string{"video.*", "order.shipped"}, "video.x", true},
		{[]string{"video.*", "order.shipped"}, "order.created", false},

		{[]string{">"}, "", false},
		{[]string{"video.*"}, "video.", false},
	}
	for _, tt := range tests {
		s := Subscriber{Events: tt.filters}
		require.Equal(t, tt.want, s.Matches(tt.event), "filters %q, event %q", tt.filters, tt.event)
	}
}

// TestMatchesDoesNotAllocate is not parallel: testing.AllocsPerRun refuses
// to run in a parallel test, whose neighbours' allocations it would count.
func TestMatchesDoesNotAllocate(t *testing.T) {
	s := Subscriber{Events: []string{"audio.*", "video.>", "order.shipped"}}
	allocs := testing.AllocsPerRun(100, func() {
		if !s.Matches("order.shipped") || s.Matches("order.created.now") {
			t.Fatal("wrong match")
		}
	})
	require.Zero(t, allocs)
}

// TestValidateReservedFilter: a relay. filter that cannot match a type of
// three tokens is refused, pointing to relay.>.
func TestValidateReservedFilter(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"relay.>", "relay.*.*", "relay.circuit.*", "relay.subscriber.paused", "video.*", "relayx.a", "*.subscriber.*"} {
		require.NoError(t, ValidateReservedFilter(f), f)
	}
	for _, f := range []string{"relay.*", "relay", "relay.circuit", "relay.circuit.opened.x", "relay.*.*.*"} {
		err := ValidateReservedFilter(f)
		require.ErrorIs(t, err, ErrInvalid, f)
		require.Contains(t, err.Error(), "--events: "+f+" matches no operational event")
		require.Contains(t, err.Error(), "give relay.> for all of them")
	}
}
