package metrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sourcegraph/conc/pool"

	"github.com/relay-dev/relay/streams"
)

// How the queue gauges are read, in a few requests whatever the number of
// subscribers:
//
//   - one stream info of DELIVERIES with a subject filter, whose answer
//     counts the messages of every subject: a subscriber's lane subject
//     (deliveries.<lane>.<id>) and its overflow (deliveries.overflow.<id>)
//     both end with its id;
//   - one batched direct get of the stream's oldest messages (at most
//     oldestBatch of them, oldestBatchBytes in all): the subscribers they
//     belong to are exactly those whose oldest message is oldest, in that
//     order, so the oldest age of all is always exact;
//   - one direct get of the first message of each of the longestQueues
//     longest queues not found by the batch (a long backlog that fills the
//     batch hides the queues behind it, but not these).
//
// A queue neither among the oldest nor among the longest has no age series
// this time. The RETRIES stream is not read: its subjects are one per parked
// message (retries.wait.<id>.<unique>), so counting them per subscriber would
// cost an answer as large as the parked messages are many, at every scrape.
const (
	deliveriesStream = streams.Deliveries
	deliveriesFilter = streams.DeliveriesFilter
	oldestBatch      = 256
	oldestBatchBytes = 1 << 20
	longestQueues    = 8
	// queueReaders is how many of those direct gets are on the wire at once.
	queueReaders = 4
)

// queues is what one read of DELIVERIES found.
type queues struct {
	// at is the server's time of the read.
	at time.Time
	// pending counts each subscriber's messages; only subscribers with
	// some are there.
	pending map[string]uint64
	// oldest is when each measured subscriber's oldest message was stored.
	oldest map[string]time.Time
}

// readQueues reads the queues of the subscribers inView holds. When only
// the ages could not be read, it returns the counts with the error.
func readQueues(ctx context.Context, nc *nats.Conn, deliveries jetstream.Stream, inView func(string) bool) (queues, error) {
	info, err := deliveries.Info(ctx, jetstream.WithSubjectFilter(deliveriesFilter))
	if err != nil {
		return queues{}, fmt.Errorf("metrics: reading the subjects of %s: %w", deliveriesStream, err)
	}
	q := queues{at: info.TimeStamp, pending: map[string]uint64{}, oldest: map[string]time.Time{}}
	if q.at.IsZero() {
		// A server too old to stamp its answers.
		q.at = time.Now()
	}
	for subject, n := range info.State.Subjects {
		if id := lastToken(subject); n > 0 && inView(id) {
			q.pending[id] += n
		}
	}
	if len(q.pending) == 0 {
		return q, nil
	}
	first := max(info.State.FirstSeq, 1)
	heads, err := oldestMessages(ctx, nc, first)
	if err != nil {
		return q, err
	}
	for _, h := range heads {
		id := lastToken(h.subject)
		if _, seen := q.oldest[id]; !seen && q.pending[id] > 0 {
			q.oldest[id] = h.at
		}
	}
	longest := make([]string, 0, len(q.pending))
	for id := range q.pending {
		if _, ok := q.oldest[id]; !ok {
			longest = append(longest, id)
		}
	}
	slices.SortFunc(longest, func(a, b string) int {
		if c := cmp.Compare(q.pending[b], q.pending[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	var mu sync.Mutex
	p := pool.New().WithContext(ctx).WithMaxGoroutines(queueReaders).WithFirstError()
	for _, id := range longest[:min(len(longest), longestQueues)] {
		p.Go(func(ctx context.Context) error {
			msg, err := deliveries.GetMsg(ctx, first, jetstream.WithGetMsgSubject(streams.SubscriberDeliveries(id)))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return nil // drained since the count
			}
			if err != nil {
				return fmt.Errorf("metrics: reading the oldest delivery of %s: %w", id, err)
			}
			mu.Lock()
			q.oldest[id] = msg.Time
			mu.Unlock()
			return nil
		})
	}
	return q, p.Wait()
}

// stored is where and when one message of DELIVERIES was stored.
type stored struct {
	subject string
	at      time.Time
}

// oldestMessages reads the subject and time of the oldest messages of
// DELIVERIES, from sequence from on, in one batched direct get.
func oldestMessages(ctx context.Context, nc *nats.Conn, from uint64) ([]stored, error) {
	got, _, err := streams.GetBatch(ctx, nc, deliveriesStream, streams.DirectGet{Seq: from, NextBySubj: deliveriesFilter, Batch: oldestBatch, MaxBytes: oldestBatchBytes})
	out := make([]stored, 0, len(got))
	for _, m := range got {
		out = append(out, stored{subject: m.Subject, at: m.Time})
	}
	if err != nil {
		return out, fmt.Errorf("metrics: reading the oldest deliveries: %w", err)
	}
	return out, nil
}

// lastToken is the subscriber id of a DELIVERIES subject, its last token.
func lastToken(subject string) string {
	return subject[strings.LastIndexByte(subject, '.')+1:]
}
