package filter

import (
	"encoding/json"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/interpreter"
	"github.com/nats-io/nats.go"
)

// bodyState is how far an [Event]'s body has been read.
type bodyState uint8

const (
	bodyUnread  bodyState = iota // no filter asked for it yet
	bodyJSON                     // parsed; value holds it
	bodyNotJSON                  // not JSON; value holds the error
)

// Event is what filters read of one event. The fan-out makes one per event
// and evaluates every matching subscriber's filter over it, so its body is
// parsed at most once, and only when a filter reads it; its headers are
// made a map once, when one reads them. It is not safe for concurrent use.
type Event struct {
	typ    ref.Val
	header nats.Header
	data   []byte

	body     bodyState
	bodyVal  ref.Val
	bodyRead bool // set when an evaluation asked for the body
	headers  ref.Val
}

// NewEvent is the event of type eventType with its NATS headers and body,
// for [Filter.Match]. Nothing is parsed or copied until a filter asks.
func NewEvent(eventType string, header nats.Header, data []byte) *Event {
	return &Event{typ: types.String(eventType), header: header, data: data}
}

// ResolveName gives a filter's variables their values: it makes an Event
// the activation CEL evaluates over (interpreter.Activation), with nothing
// made per evaluation.
func (ev *Event) ResolveName(name string) (any, bool) {
	switch name {
	case VarType:
		return ev.typ, true
	case VarBody:
		ev.bodyRead = true
		if ev.body == bodyUnread {
			var v any
			if err := json.Unmarshal(ev.data, &v); err != nil {
				ev.body, ev.bodyVal = bodyNotJSON, types.NewErr("the event's body is not JSON: %v", err)
			} else {
				ev.body, ev.bodyVal = bodyJSON, types.DefaultTypeAdapter.NativeToValue(v)
			}
		}
		return ev.bodyVal, true
	case VarHeaders:
		if ev.headers == nil {
			m := make(map[string]string, len(ev.header))
			for k, vs := range ev.header {
				if len(vs) > 0 {
					m[k] = vs[0]
				}
			}
			ev.headers = types.DefaultTypeAdapter.NativeToValue(m)
		}
		return ev.headers, true
	}
	return nil, false
}

// Parent is nil: an Event is the only activation.
func (ev *Event) Parent() interpreter.Activation { return nil }
