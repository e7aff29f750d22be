package subscribers

import (
	"slices"
	"strings"

	"github.com/relay-dev/relay/internal/opevent"
)

// reservedToken is the first token of the operational event types
// (opevent.Prefix without its dot).
const reservedToken = "relay"

// filterIndex finds the enabled subscribers whose event filters match an
// event type without looking at the others: the fan-out asks it once per
// event, and with 10,000 subscribers a scan of every filter would be most of
// an event's cost. It is a tree of filter tokens, as NATS's own subject
// index is; a lookup walks the event type's tokens, following the literal
// token and "*" at each level and collecting ">" on the way, so its cost
// grows with the matches, not with the subscribers. It is built once per
// view and never changed, so lookups need no lock.
type filterIndex struct {
	// every lists the subscribers without filters: they match anything.
	every []int
	root  indexNode
}

// indexNode is one token position of the filters that reach it.
type indexNode struct {
	literal map[string]*indexNode
	star    *indexNode
	// rest lists the subscribers with a filter ending in ">" here: they
	// match one or more further tokens.
	rest []int
	// end lists the subscribers with a filter ending here.
	end []int
}

// add indexes subscriber i (a position in the enabled list) for its filters.
func (ix *filterIndex) add(i int, filters []string) {
	if len(filters) == 0 {
		ix.every = append(ix.every, i)
		return
	}
	for _, f := range filters {
		n := &ix.root
		for tok := range strings.SplitSeq(f, ".") {
			if tok == fullWildcard {
				n.rest = append(n.rest, i)
				n = nil
				break
			}
			n = n.child(tok)
		}
		if n != nil {
			n.end = append(n.end, i)
		}
	}
}

func (n *indexNode) child(tok string) *indexNode {
	if tok == singleWildcard {
		if n.star == nil {
			n.star = &indexNode{}
		}
		return n.star
	}
	if n.literal == nil {
		n.literal = map[string]*indexNode{}
	}
	c := n.literal[tok]
	if c == nil {
		c = &indexNode{}
		n.literal[tok] = c
	}
	return c
}

// match returns the positions of the subscribers one of whose filters
// matches eventType, ascending and each once, appended to buf.
func (ix *filterIndex) match(eventType string, buf []int) []int {
	out := buf
	if rest, ok := strings.CutPrefix(eventType, opevent.Prefix); ok {
		// Reserved: only a filter whose first token is "relay" names it.
		if c := ix.root.literal[reservedToken]; c != nil && rest != "" {
			out = c.match(rest, out)
		}
	} else {
		out = append(out, ix.every...)
		if eventType != "" {
			out = ix.root.match(eventType, out)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// match collects what matches subject, the event type's tokens from this
// node's level on; subject is not empty.
func (n *indexNode) match(subject string, out []int) []int {
	tok, rest, more := strings.Cut(subject, ".")
	if tok == "" {
		return out // an empty token matches no filter
	}
	out = append(out, n.rest...) // ">" takes this token and any after
	for _, c := range [2]*indexNode{n.literal[tok], n.star} {
		if c == nil {
			continue
		}
		if more {
			out = c.match(rest, out)
		} else {
			out = append(out, c.end...)
		}
	}
	return out
}
