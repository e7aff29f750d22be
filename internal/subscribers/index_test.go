package subscribers

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// indexFilters are filters of every shape: literal, "*" at each place, ">"
// at each place, and overlapping ones for one subscriber.
var indexFilters = [][]string{
	nil,
	{"video.trending"},
	{"video.*"},
	{"video.>"},
	{"*.trending"},
	{"*"},
	{">"},
	{"*.*.hd"},
	{"order.*", "order.>"},
	{"order.shipped", "video.trending", "misc"},
	{"a.*.c.>"},
}

var indexTypes = []string{
	"video", "video.trending", "video.uploaded", "video.a.b", "order", "order.shipped",
	"order.item.added", "misc", "x.trending", "a.b.c", "a.b.c.d", "a.b.c.d.e", "v.x.hd", "v.hd",
}

// bruteForce is what the index must return: every subscriber whose
// Matches says yes, in order.
func bruteForce(subs []Subscriber, eventType string) []int {
	var out []int
	for i, s := range subs {
		if s.Matches(eventType) {
			out = append(out, i)
		}
	}
	return out
}

func TestFilterIndexMatchesWhatMatchesSays(t *testing.T) {
	t.Parallel()
	var ix filterIndex
	subs := make([]Subscriber, len(indexFilters))
	for i, f := range indexFilters {
		subs[i] = Subscriber{Events: f}
		ix.add(i, f)
	}
	for _, et := range indexTypes {
		got := ix.match(et, nil)
		if want := bruteForce(subs, et); !slices.Equal(got, want) {
			t.Errorf("%q: index %v, Matches %v", et, got, want)
		}
	}
}

// FuzzFilterIndex checks the index against two references: Matches (what
// the fan-out did before the index), and tokenMatch, a plain reading of the
// NATS wildcard rules that shares no code with either, so that a mistake
// common to the index and Matches shows too. filters is a comma-separated
// list of subscribers, each a "|"-separated list of filters (an empty one:
// no filter, every event); invalid filters are dropped, as Validate would
// refuse them. The result must be ascending and without repeats, and a
// reused buffer must not change it. `go test` runs the seeds; `make fuzz`
// fuzzes it.
func FuzzFilterIndex(f *testing.F) {
	f.Add("video.*,order.>,*.x", "video.a")
	f.Add(">,a.b", "a.b.c")
	f.Add("a.*|a.>|*.b,,a.b", "a.b")
	f.Add("*.*.*|>,a.>", "a")
	f.Add("a.*.c.>|a.b.c,*", "a.b.c.d")
	f.Add("x.y|x.y|x.>", "x.y")
	f.Add("video.*,video", "video")
	f.Add("*", "\u00e9t\u00e9")
	f.Add(">,relay.>|*.subscriber.*,relay.subscriber.*,,*.*.*", "relay.subscriber.disabled")
	f.Fuzz(func(t *testing.T, filters, eventType string) {
		var ix filterIndex
		var subs []Subscriber
		for part := range strings.SplitSeq(filters, ",") {
			if len(subs) > 20 {
				break
			}
			var fs []string
			for flt := range strings.SplitSeq(part, "|") {
				if ValidateFilter(flt) == nil {
					fs = append(fs, flt)
				}
			}
			if len(fs) == 0 && part != "" {
				continue // only invalid filters: not a subscriber
			}
			subs = append(subs, Subscriber{Events: fs})
			ix.add(len(subs)-1, fs)
		}
		if ValidateFilter(eventType) != nil || strings.ContainsAny(eventType, "*>") {
			return
		}
		got := ix.match(eventType, nil)
		if want := bruteForce(subs, eventType); !slices.Equal(got, want) {
			t.Fatalf("%q over %q: index %v, Matches %v", eventType, filters, got, want)
		}
		// The NATS rules, but for the reserved "relay." types, which only a
		// filter starting "relay." names.
		reserved := strings.HasPrefix(eventType, "relay.")
		var want []int
		for i, s := range subs {
			if (len(s.Events) == 0 && !reserved) || slices.ContainsFunc(s.Events, func(flt string) bool {
				return tokenMatch(flt, eventType) && (!reserved || strings.HasPrefix(flt, "relay."))
			}) {
				want = append(want, i)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%q over %q: index %v, the NATS rules %v", eventType, filters, got, want)
		}
		for _, s := range subs {
			for _, flt := range s.Events {
				if MatchFilter(flt, eventType) != tokenMatch(flt, eventType) {
					t.Fatalf("MatchFilter(%q, %q) = %v", flt, eventType, MatchFilter(flt, eventType))
				}
			}
		}
		buf := append(make([]int, 0, 64), 99, 98, 97)
		if again := ix.match(eventType, buf[:0]); !slices.Equal(again, got) {
			t.Fatalf("%q over %q: a reused buffer gives %v, not %v", eventType, filters, again, got)
		}
	})
}

// tokenMatch is the NATS rule written out on split tokens: "*" is any one
// token, ">" one or more last tokens, anything else itself.
func tokenMatch(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range ft {
		switch {
		case tok == fullWildcard:
			return len(st) > i
		case i >= len(st):
			return false
		case tok != singleWildcard && tok != st[i]:
			return false
		}
	}
	return len(ft) == len(st)
}

// BenchmarkMatch compares, for 10,000 subscribers each on its own event
// type pattern plus 10 on every event, the index with a scan of every
// subscriber's filters, as the fan-out did before:
//
//	go test -run '^$' -bench Match ./internal/subscribers/
func BenchmarkMatch(b *testing.B) {
	const n = 10_000
	var ix filterIndex
	subs := make([]Subscriber, 0, n+10)
	for i := range n {
		f := []string{"tenant" + strconv.Itoa(i) + ".*"}
		subs = append(subs, Subscriber{Events: f})
		ix.add(len(subs)-1, f)
	}
	for range 10 {
		subs = append(subs, Subscriber{})
		ix.add(len(subs)-1, nil)
	}
	const eventType = "tenant4242.video"
	b.Run("index", func(b *testing.B) {
		buf := make([]int, 0, 16)
		for b.Loop() {
			buf = ix.match(eventType, buf[:0])
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			_ = bruteForce(subs, eventType)
		}
	})
}

// BenchmarkSnapshot is what one change of the bucket costs a relay that
// holds 10,000 subscribers: the watch folds it in and builds the view's
// next snapshot.
//
//	go test -run '^$' -bench Snapshot ./internal/subscribers/
func BenchmarkSnapshot(b *testing.B) {
	st := newLiveState(nil)
	for i := range 10_000 {
		id := "sub" + strconv.Itoa(i)
		st.put(id, Subscriber{ID: id, URL: "https://example.com/" + id, Events: []string{"tenant" + strconv.Itoa(i) + ".*"}})
	}
	i := 0
	for b.Loop() {
		id := "sub" + strconv.Itoa(i%10_000)
		st.put(id, Subscriber{ID: id, URL: "https://example.com/" + id, Events: []string{"tenant" + strconv.Itoa(i) + ".*"}})
		_ = st.snapshot()
		i++
	}
}

// TestOperationalEventsOnlyToThoseWhoNameThem: an event type under
// "relay." reaches only the subscribers one of whose filters starts with
// "relay" (DESIGN: a subscriber gets them only if its --events names a
// relay. type); no filter, ">", "*" or "*.subscriber.*" does not.
func TestOperationalEventsOnlyToThoseWhoNameThem(t *testing.T) {
	filters := [][]string{nil, {">"}, {"*.subscriber.*"}, {"*.*.*"}, {"relay.>"}, {"relay.subscriber.*"}, {"relay.circuit.opened"}, {"video.*", "relay.subscriber.disabled"}}
	var ix filterIndex
	for i, fs := range filters {
		ix.add(i, fs)
	}
	require.Equal(t, []int{4, 5, 7}, ix.match("relay.subscriber.disabled", nil))
	require.Equal(t, []int{4, 6}, ix.match("relay.circuit.opened", nil))
	require.Equal(t, []int{0, 1, 7}, ix.match("video.x", nil), "other types as before")
	require.Equal(t, []int{0, 1}, ix.match("relay", nil), "relay alone is no reserved type")
	for i, fs := range filters {
		s := Subscriber{Events: fs}
		require.Equal(t, slices.Contains([]int{4, 5, 7}, i), s.Matches("relay.subscriber.disabled"), "%v", fs)
	}
}
