package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrDirectGet is returned when the server answers a direct get with
// something other than messages and the end of the batch.
var ErrDirectGet = errors.New("direct get")

// DirectGet is the request of a direct get ($JS.API.DIRECT.GET.<stream>).
// Batched ([GetBatch]), it brings up to Batch messages from sequence Seq
// on, on NextBySubj (every subject when empty), and the server stops once
// the messages it sent reach MaxBytes, the one that reached it included (at
// its max_pending when zero); with MultiLast, the last message of each of
// those subjects that has one (Batch at most), in the order they were
// stored. Single ([Get], [SeqOf]), it brings the first message from Seq on
// NextBySubj, or the last on LastBySubj. Any replica of a stream that
// allows direct gets answers it, without its leader.
type DirectGet struct {
	Seq        uint64   `json:"seq,omitempty"`
	NextBySubj string   `json:"next_by_subj,omitempty"`
	LastBySubj string   `json:"last_by_subj,omitempty"`
	MultiLast  []string `json:"multi_last,omitempty"`
	Batch      int      `json:"batch,omitempty"`
	MaxBytes   int      `json:"max_bytes,omitempty"`
}

// The headers of a server's status reply (to a pull, a direct get), and of
// a batch's end: nats.go keeps its own names for them unexported.
const (
	HeaderStatus      = "Status"
	HeaderDescription = "Description"
	headerNumPending  = "Nats-Num-Pending"
)

// Get sends one direct get (no batch) to stream: the first message from
// req.Seq on req.NextBySubj, or the last on req.LastBySubj. found is false
// when there is none.
func Get(ctx context.Context, nc *nats.Conn, stream string, req DirectGet) (s Stored, found bool, err error) {
	req.Batch, req.MaxBytes, req.MultiLast = 0, 0, nil
	body, err := json.Marshal(req)
	if err != nil {
		return Stored{}, false, err
	}
	m, err := nc.RequestWithContext(ctx, directGetSubject(stream), body)
	if err != nil {
		return Stored{}, false, fmt.Errorf("reading %s: %w", stream, err)
	}
	switch status := m.Header.Get(HeaderStatus); status {
	case "":
	case "404":
		return Stored{}, false, nil
	default:
		return Stored{}, false, fmt.Errorf("%w on %s: status %s %s", ErrDirectGet, stream, status, m.Header.Get(HeaderDescription))
	}
	s, err = decodeStored(m)
	if err != nil {
		return Stored{}, false, fmt.Errorf("%w on %s: %w", ErrDirectGet, stream, err)
	}
	return s, true, nil
}

// SeqOf returns the sequence of the message of stream that req asks for
// (req.Seq and req.NextBySubj, or req.LastBySubj), and whether there is
// one: by a direct get, or with leader by the stream leader's message get,
// which has seen every write acknowledged before it (a replica may answer a
// direct get before it has applied the latest one).
func SeqOf(ctx context.Context, nc *nats.Conn, stream string, req DirectGet, leader bool) (uint64, bool, error) {
	if !leader {
		s, found, err := Get(ctx, nc, stream, req)
		return s.Seq, found, err
	}
	body, err := json.Marshal(struct {
		Seq        uint64 `json:"seq,omitempty"`
		NextBySubj string `json:"next_by_subj,omitempty"`
		LastBySubj string `json:"last_by_subj,omitempty"`
	}{req.Seq, req.NextBySubj, req.LastBySubj})
	if err != nil {
		return 0, false, err
	}
	m, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", stream, err)
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return 0, false, nil
	case resp.Error != nil:
		return 0, false, fmt.Errorf("reading %s: %w", stream, resp.Error)
	case resp.Message == nil:
		return 0, false, fmt.Errorf("reading %s: an empty reply", stream)
	}
	return resp.Message.Seq, true, nil
}

// directGetSubject is the API subject of a direct get of stream.
func directGetSubject(stream string) string { return "$JS.API.DIRECT.GET." + stream }

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
	if err := nc.PublishRequest(directGetSubject(stream), inbox, body); err != nil {
		return nil, false, fmt.Errorf("reading %s: %w", what, err)
	}
	ctx, cancel := context.WithTimeout(ctx, directGetWait)
	defer cancel()
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return msgs, false, fmt.Errorf("reading %s: %w", what, err)
		}
		if status := m.Header.Get(HeaderStatus); status != "" {
			switch status {
			case "204": // the end of the batch
				pending, perr := strconv.ParseUint(m.Header.Get(headerNumPending), 10, 64)
				return msgs, perr == nil && pending == 0, nil
			case "404": // nothing from that sequence on
				return msgs, true, nil
			}
			return msgs, false, fmt.Errorf("%w on %s: status %s %s", ErrDirectGet, what, status, m.Header.Get(HeaderDescription))
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
