package backlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/relay-dev/relay/internal/attempts"
	"github.com/relay-dev/relay/internal/deadletter"
	"github.com/relay-dev/relay/internal/overflow"
	"github.com/relay-dev/relay/internal/ratelimit"
	"github.com/relay-dev/relay/streams"
)

// evictMost bounds the messages one eviction dead-letters; [overflow.Read]
// also bounds their bytes.
const evictMost = 1024

// Evict makes room in a DELIVERIES at least [EvictFrom] full: it
// dead-letters, oldest first and with reason backlog, the held backlog
// (overflow) of the subscriber furthest over its fair share, down to that
// share, then purges what it stored: a paused or disabled one first, else
// one its flow control holds (a Retry-After, a circuit not closed), never
// one that drains its backlog itself.
// It holds the subscriber's refill lease meanwhile, so that nothing brings
// that overflow back at the same time: no delivery is both sent and
// dead-lettered. Each dead letter's Nats-Msg-Id is
// dlq.<DELIVERIES sequence>, as a lane's, so relays evicting together, or
// one that dies before its purge, store one entry a message; and it works
// as a refill does (overflow.Refiller, every message settled by its dead
// letter), under the subscriber's refill lease. It returns how
// many it dead-lettered. [Gauge.Run] calls it after each read.
func (g *Gauge) Evict(ctx context.Context) (int, error) {
	g.mu.Lock()
	var victim string
	var excess, share float64
	idle := false
	full, _ := g.shareLocked("")
	if full >= EvictFrom {
		// A paused or disabled subscriber first: nothing is on its way to
		// it. Else the one furthest over its share, whose circuit may be
		// open, or whose Retry-After outlasts the room: left alone, its
		// held backlog keeps DELIVERIES full for everyone.
		for id, held := range g.held {
			_, s := g.shareLocked(id)
			over := float64(g.counts[id]+g.since[id]) - s
			if held == 0 || over <= 0 || (idle && !g.idle[id]) {
				continue
			}
			if (g.idle[id] && !idle) || over > excess {
				victim, excess, share, idle = id, over, s, g.idle[id]
			}
		}
	}
	heldThen := g.held[victim]
	maxBytes := g.maxBytes
	g.mu.Unlock()
	if victim == "" {
		return 0, nil
	}
	if !idle {
		// Not paused nor disabled: only one that cannot be sent to now
		// (a Retry-After, an open circuit) is made room against; one
		// that drains (resumed, catching up) makes the room itself.
		held, err := g.blocked(ctx, victim)
		if err != nil || !held {
			return 0, err
		}
	}
	// Looked at again just before: another relay may have made the room
	// since the figures were read.
	deliveries, err := g.cfg.JS.Stream(ctx, streams.Deliveries)
	if err != nil {
		return 0, fmt.Errorf("backlog: evicting %s: %w", victim, err)
	}
	now, err := deliveries.Info(ctx, jetstream.WithSubjectFilter(streams.OverflowSubject(victim)))
	if err != nil {
		return 0, fmt.Errorf("backlog: evicting %s: %w", victim, err)
	}
	heldNow := now.State.Subjects[streams.OverflowSubject(victim)]
	full = float64(now.State.Bytes) / float64(maxBytes)
	excess -= float64(heldThen) - float64(min(heldNow, heldThen))
	if full < EvictFrom || excess < 1 || heldNow == 0 {
		return 0, nil
	}
	n := min(int(excess)+1, evictMost, int(heldNow))
	why := fmt.Sprintf("evicted from overflow: DELIVERIES was %.0f%% full and subscriber %s held %.0f more than its fair share of %.0f",
		100*full, victim, excess, share)
	// A refill whose every message is settled by its dead letter: it reads
	// the oldest, stores each DLQ copy, purges the prefix stored, and holds
	// the subscriber's refill lease meanwhile.
	var stored atomic.Int64
	r, err := overflow.NewRefiller(ctx, g.cfg.JS, func(_ string, m overflow.Msg) func(context.Context) error {
		return func(ctx context.Context) error {
			d := deadletter.Death{Subscriber: victim, Reason: deadletter.Backlog, LastError: why, OriginSeq: m.Seq,
				OriginSubject: streams.OverflowSubject(victim)}
			d.Attempts, d.FirstAttemptAt = streams.AttemptsOf(m.Header)
			seq, err := deadletter.Publish(ctx, g.cfg.JS, m.Data, m.Header, d)
			if err != nil {
				return err
			}
			stored.Add(1)
			if ev := m.Header.Get(streams.HeaderEventID); ev != "" {
				g.cfg.Records.Attempt(attempts.Record{Event: ev, Subscriber: victim, At: g.cfg.Clock.Now(),
					Outcome: attempts.Dead, Reason: string(deadletter.Backlog), Error: why, DLQSeq: seq})
			}
			g.cfg.Ops.Dead(victim, string(deadletter.Backlog), m.Header.Get(streams.HeaderEventType))
			return nil
		}
	})
	if err != nil {
		return 0, fmt.Errorf("backlog: evicting %s: %w", victim, err)
	}
	_, _, _, err = r.Refill(ctx, victim, streams.OverflowSubject(victim), 0, n)
	evicted := int(stored.Load())
	if evicted > 0 {
		g.mu.Lock()
		if g.counts != nil && g.held != nil { // nil: a read since found nobody near a bound
			g.counts[victim] -= min(g.counts[victim], uint64(evicted))
			g.held[victim] -= min(g.held[victim], uint64(evicted))
		}
		g.mu.Unlock()
		for range evicted {
			g.cfg.Metrics.DeadLettered(victim, deadletter.Backlog)
		}
		g.log.Warn("backlog: DELIVERIES is nearly full; dead-lettered the oldest of a subscriber's held backlog",
			"subscriber", victim, "dead_lettered", evicted, "fair_share", int(share))
	}
	if err != nil && !errors.Is(err, overflow.ErrLeased) {
		return evicted, fmt.Errorf("backlog: evicting %s: %w", victim, err)
	}
	return evicted, nil
}

// blocked reports whether the subscriber's relay_ratelimit entry holds it:
// paused by a Retry-After, or its circuit not closed.
func (g *Gauge) blocked(ctx context.Context, id string) (bool, error) {
	kv, err := g.cfg.JS.KeyValue(ctx, streams.RateLimitBucket)
	if err != nil {
		return false, fmt.Errorf("backlog: reading %s's flow control: %w", id, err)
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("backlog: reading %s's flow control: %w", id, err)
	}
	var st ratelimit.State
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return false, nil
	}
	now := g.cfg.Clock.Now()
	return now.Before(st.PausedUntil) || st.CircuitAt(now) != ratelimit.Closed, nil
}
