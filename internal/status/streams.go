package status

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/streams"
)

// Stream is one relay stream's use against its limits, a row of the
// streams section of `relay status` and an element of
// `relay status --streams --json`: a DELIVERIES near its max_bytes is what
// makes the fan-out wait, and the limits are an operator's to change
// (relay keeps them, see docs/streams.md), so the report shows both.
type Stream struct {
	// Name is the stream's: EVENTS, DELIVERIES, RETRIES, DLQ, BODIES or
	// ATTEMPTS.
	Name string `json:"stream"`
	// Messages is what the stream holds now, and MaxMessages its
	// max_msgs, -1 when unlimited.
	Messages    uint64 `json:"messages"`
	MaxMessages int64  `json:"max_messages"`
	// Bytes is what the stream stores now, and MaxBytes its max_bytes,
	// -1 when unlimited (it then reserves nothing of the account).
	Bytes    uint64 `json:"bytes"`
	MaxBytes int64  `json:"max_bytes"`
	// Used is Bytes/MaxBytes, from 0 to 1; nil when MaxBytes is
	// unlimited.
	Used *float64 `json:"used,omitempty"`
	// MaxAge is the stream's max_age, such as "168h0m0s"; empty when
	// messages stay until removed.
	MaxAge string `json:"max_age,omitempty"`
	// Discard is what the stream does when full: "new" refuses what comes
	// (DELIVERIES: the fan-out waits), "old" drops its oldest messages.
	Discard string `json:"discard"`
}

// streamNames are the streams the report shows, in the order of a
// delivery's way through them.
var streamNames = []string{streams.Events, streams.Deliveries, streams.Retries, streams.DLQ, streams.Bodies, streams.Attempts}

// Streams reads the use of each relay stream against its limits: one
// stream info each, whatever the number of subscribers.
func Streams(ctx context.Context, js jetstream.JetStream) ([]Stream, error) {
	out := make([]Stream, 0, len(streamNames))
	for _, name := range streamNames {
		s, err := js.Stream(ctx, name)
		if (name == streams.Bodies || name == streams.Attempts) && err != nil {
			// Relays older than it, relays that record no attempts, or a
			// user not granted its info.
			continue
		}
		if err != nil {
			return nil, streamErr(name, err)
		}
		out = append(out, streamUse(s.CachedInfo()))
	}
	return out, nil
}

// streamUse is the [Stream] of a stream info.
func streamUse(info *jetstream.StreamInfo) Stream {
	cfg := info.Config
	s := Stream{
		Name:        cfg.Name,
		Messages:    info.State.Msgs,
		MaxMessages: unlimited(cfg.MaxMsgs),
		Bytes:       info.State.Bytes,
		MaxBytes:    unlimited(cfg.MaxBytes),
		Discard:     "old",
	}
	if cfg.Discard == jetstream.DiscardNew {
		s.Discard = "new"
	}
	if s.MaxBytes > 0 {
		used := float64(s.Bytes) / float64(s.MaxBytes)
		s.Used = &used
	}
	if cfg.MaxAge > 0 {
		s.MaxAge = cfg.MaxAge.Round(time.Second).String()
	}
	return s
}

// unlimited writes every "no limit" JetStream reports (0 or -1) as -1.
func unlimited(n int64) int64 {
	if n <= 0 {
		return -1
	}
	return n
}
