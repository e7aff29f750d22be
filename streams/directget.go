package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrDirectGet is returned when the server answers a direct get with
// something other than messages and the end of the batch.
var ErrDirectGet = errors.New("streams: direct get")

// DirectGet is a batched direct get ($JS.API.DIRECT.GET.<stream>): up to
// Batch messages from sequence Seq on, on NextBySubj (every subject when
// empty). The server stops once the messages it sent reach MaxBytes, the
// one that reached it included (at its max_pending when zero). Any
// replica of a stream that allows direct gets answers it, without its
// leader.
//
// With MultiLast, it brings instead the last message of each of those
// subjects that has one (Batch at most), in the order they were stored.
type DirectGet struct {
	Seq        uint64   `json:"seq,omitempty"`
	NextBySubj string   `json:"next_by_subj,omitempty"`
	MultiLast  []string `json:"multi_last,omitempty"`
	Batch      int      `json:"batch"`
	MaxBytes   int      `json:"max_bytes,omitempty"`
}

// Stored is one message a direct get brought.
type Stored struct {
	// Seq is its sequence in the stream.
	Seq uint64
	// Subject is the subject it was stored on.
	Subject string
	// Time is when the server stored it.
	Time time.Time
	// Header holds its headers, the Nats-* ones the server adds included.
	Header nats.Header
	// Data is its body, exactly as stored.
	Data []byte
}

// directGetWait bounds one batched direct get: its messages come one after
// another, and a server that sends nothing for this long is taken as gone.
const directGetWait = 10 * time.Second

// GetBatch sends one batched direct get to stream and returns the messages
// it brought. done reports that nothing follows them on the subject (or in
// the stream).
func GetBatch(ctx context.Context, nc *nats.Conn, stream string, req DirectGet) (msgs []Stored, done bool, err error) {
	what := stream
	if req.NextBySubj != "" {
		what += " " + req.NextBySubj
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", what, err)
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", what, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, body); err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", what, err)
	}
	ctx, cancel := context.WithTimeout(ctx, directGetWait)
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return msgs, false, fmt.Errorf("reading %s: %w", what, err)
		}
		if status := m.Header.Get("Status"); status != "" {
			switch status {
			case "204": // the end of the batch
				pending, perr := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return msgs, perr == nil && pending == 0, nil
			case "404": // nothing from that sequence on
				return msgs, true, nil
			}
			return msgs, false, fmt.Errorf("%w on %s: status %s %s", ErrDirectGet, what, status, m.Header.Get("Description"))
		}
		s, err := decodeStored(m)
		if err != nil {
			return msgs, false, fmt.Errorf("%w on %s: %w", ErrDirectGet, what, err)
		}
		msgs = append(msgs, s)
		if len(msgs) == req.Batch {
			// The server still sends its end of the batch; a sequence past
			// the last one read costs nothing to ask for next time.
			return msgs, false, nil
		}
	}
}

// decodeStored reads a direct get's answer: the stored message's subject,
// sequence and time come in headers.
func decodeStored(m *nats.Msg) (Stored, error) {
	seq, err := strconv.ParseUint(m.Header.Get(nats.JSSequence), 10, 64)
	if err != nil {
		return Stored{}, errors.New("no sequence")
	}
	at, err := time.Parse(time.RFC3339Nano, m.Header.Get(nats.JSTimeStamp))
	if err != nil {
		return Stored{}, errors.New("no time stamp")
	}
	return Stored{Seq: seq, Subject: m.Header.Get(nats.JSSubject), Time: at, Header: m.Header, Data: m.Data}, nil
}
