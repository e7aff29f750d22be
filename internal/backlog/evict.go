package backlog

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/streams"
)

// evictMost bounds the messages one eviction dead-letters; [overflow.Read]
// also bounds their bytes.
const evictMost = 1024

// evictWait bounds the wait for one eviction's PubAcks.
const evictWait = 10 * time.Second

// Evict makes room in a DELIVERIES at least [EvictFrom] full: it
// dead-letters, oldest first and with reason backlog, the held backlog
// (overflow) of the paused or disabled subscriber furthest over its fair
// share, down to that share, then purges what it stored. Only a paused or
// disabled subscriber's: nothing brings its overflow back meanwhile, so no
// delivery is both sent and dead-lettered. Each dead letter's Nats-Msg-Id is
// dlq.<DELIVERIES sequence>, as a lane's, so relays evicting together, or
// one that dies before its purge, store one entry a message. It returns how
// many it dead-lettered. [Gauge.Run] calls it after each read.
func (g *Gauge) Evict(ctx context.Context) (int, error) {
	g.mu.Lock()
	var victim string
	var excess, share float64
	full, _ := g.shareLocked("")
	if full >= EvictFrom {
		for id, held := range g.held {
			if !g.idle[id] {
				continue
			}
			_, s := g.shareLocked(id)
			over := float64(g.counts[id]+g.since[id]) - s
			if held > 0 && over > excess {
				victim, excess, share = id, over, s
			}
		}
	}
	heldThen := g.held[victim]
	maxBytes := g.maxBytes
	g.mu.Unlock()
	if victim == "" {
		return 0, nil
	}
	// Looked at again just before: another relay may have made the room
	// since the figures were read.
	deliveries, err := g.cfg.JS.Stream(ctx, streams.Deliveries)
	if err != nil {
		return 0, fmt.Errorf("backlog: evicting %s: %w", victim, err)
	}
	now, err := deliveries.Info(ctx, jetstream.WithSubjectFilter(overflow.Subject(victim)))
	if err != nil {
		return 0, fmt.Errorf("backlog: evicting %s: %w", victim, err)
	}
	heldNow := now.State.Subjects[overflow.Subject(victim)]
	full = float64(now.State.Bytes) / float64(maxBytes)
	excess -= float64(heldThen) - float64(min(heldNow, heldThen))
	if full < EvictFrom || excess < 1 || heldNow == 0 {
		return 0, nil
	}
	n := min(int(excess)+1, evictMost, int(heldNow))
	msgs, err := overflow.Read(ctx, g.cfg.JS.Conn(), victim, 0, n)
	if err != nil || len(msgs) == 0 {
		return 0, err
	}
	why := fmt.Sprintf("evicted from overflow: DELIVERIES was %.0f%% full and subscriber %s held %.0f more than its fair share of %.0f",
		100*full, victim, excess, share)
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	var failed error
	for _, m := range msgs {
		d := deadletter.Death{Subscriber: victim, Reason: deadletter.Backlog, LastError: why, OriginSeq: m.Seq,
			OriginSubject: overflow.Subject(victim)}
		d.Attempts, _ = strconv.Atoi(m.Header.Get(streams.HeaderAttempt))
		if t, err := time.Parse(time.RFC3339Nano, m.Header.Get(streams.HeaderFirstAttemptAt)); err == nil {
			d.FirstAttemptAt = t
		}
		f, perr := deadletter.PublishAsync(g.cfg.JS, m.Data, m.Header, d)
		if perr != nil {
			failed = perr
			break
		}
		futures = append(futures, f)
	}
	stored := 0
	timeout := time.NewTimer(evictWait)
	defer timeout.Stop()
wait:
	for _, f := range futures {
		select {
		case <-f.Ok():
			stored++
		case failed = <-f.Err():
			break wait
		case <-timeout.C:
			failed = fmt.Errorf("no PubAck within %v", evictWait)
			break wait
		case <-ctx.Done():
			failed = ctx.Err()
			break wait
		}
	}
	if stored == 0 {
		return 0, fmt.Errorf("backlog: evicting %s: %w", victim, failed)
	}
	if perr := deliveries.Purge(ctx, jetstream.WithPurgeSubject(overflow.Subject(victim)),
		jetstream.WithPurgeSequence(msgs[stored-1].Seq+1)); perr != nil {
		// The dead letters are stored: the next eviction reads the same
		// messages and stores nothing new for them.
		return 0, fmt.Errorf("backlog: purging what was evicted of %s: %w", victim, perr)
	}
	g.mu.Lock()
	if g.counts != nil && g.held != nil { // nil: a read since found nobody near a bound
		g.counts[victim] -= min(g.counts[victim], uint64(stored))
		g.held[victim] -= min(g.held[victim], uint64(stored))
	}
	g.mu.Unlock()
	for range stored {
		g.cfg.Metrics.DeadLettered(victim, deadletter.Backlog)
	}
	g.log.Warn("backlog: DELIVERIES is nearly full; dead-lettered the oldest of a subscriber's held backlog",
		"subscriber", victim, "dead_lettered", stored, "fair_share", int(share))
	if failed != nil {
		return stored, fmt.Errorf("backlog: evicting %s: %w", victim, failed)
	}
	return stored, nil
}
