package subscribers

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLaneFor(t *testing.T) {
	t.Parallel()

	// FNV-1a 32 of "a" is 0xe40c292c, the value of the published test
	// vectors; 0xe40c292c mod 16 is 12.
	require.Equal(t, "s12", LaneFor("a", 16))

	for _, id := range []string{"a", "orders", "video-service_2", strings.Repeat("x", 64)} {
		h := fnv.New32a()
		h.Write([]byte(id))
		for _, shared := range []int{1, 7, 16, 64, 100, 250} {
			want := fmt.Sprintf("s%02d", h.Sum32()%uint32(shared))
			require.Equal(t, want, LaneFor(id, shared), "id %q shared %d", id, shared)
			require.Equal(t, want, LaneFor(id, shared), "stable")
		}
	}

	seen := map[string]bool{}
	for i := range 1000 {
		lane := LaneFor(fmt.Sprintf("sub-%d", i), 16)
		require.Regexp(t, `^s\d\d$`, lane)
		n, err := strconv.Atoi(lane[1:])
		require.NoError(t, err)
		require.True(t, n >= 0 && n < 16, lane)
		seen[lane] = true
	}
	require.Len(t, seen, 16, "1000 ids spread over every lane")

	require.Equal(t, "s00", LaneFor("a", 0), "fewer than one lane is one lane")
	require.Equal(t, "s00", LaneFor("a", -5))
}

func TestLane(t *testing.T) {
	t.Parallel()
	s := Subscriber{ID: "big-customer"}
	require.Equal(t, LaneFor("big-customer", 16), s.Lane(16))
	s.Dedicated = true
	require.Equal(t, "d_big-customer", s.Lane(16))
}
