package subscribers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/relay-dev/relay/internal/clock"
)

// janitorRetry is how soon the janitor tries again a subscriber it could
// not rewrite (NATS unavailable, a value it cannot read): soon enough that a
// retired secret does not outstay its grace by much, seldom enough to cost
// nothing while NATS is down.
const janitorRetry = 5 * time.Second

// RunJanitor keeps what has ended out of the bucket until ctx is cancelled
// or the view stops: it rewrites each subscriber whose previous secrets'
// grace is over without them, so that a retired secret is not readable in
// the bucket (which keeps one value a key) beyond its grace, and one whose
// timed pause has passed without the pause, so that every relay's view
// changes at that moment and their lanes deliver the backlog at once rather
// than at their next sweep. Signing does not wait for it: [Subscriber.Keys]
// leaves an ended secret out whatever the bucket holds.
//
// It costs nothing per message and no scan of the subscribers: the [Live]
// view lists those holding something that ends, soonest first, and the
// janitor sleeps until the soonest end or the next change of the view. Every
// relay runs one; the rewrites are compare-and-set, so that relays racing
// for the same subscriber write it once, and a concurrent `relay sub`
// change is never undone. clk is the time source (nil: [clock.Real]); a
// rewrite that fails is logged on log (nil: slog.Default()) and tried again
// after a few seconds.
func (s *Store) RunJanitor(ctx context.Context, live *Live, clk clock.Clock, log *slog.Logger) {
	if clk == nil {
		clk = clock.Real
	}
	if log == nil {
		log = slog.Default()
	}
	for {
		changed := live.Changed()
		now := clk.Now()
		var next time.Time
		retry := false
		for _, e := range live.expiring() {
			if e.at.After(now) {
				next = e.at
				break
			}
			wrote, err := s.tidy(ctx, e.id, now)
			if ctx.Err() != nil {
				return
			}
			if err != nil && !errors.Is(err, ErrNotFound) {
				log.Warn("subscribers: dropping ended secrets or pause", "subscriber", e.id, "err", err)
			}
			// Nothing written, so no change of the view may come to say it
			// is done: look again in a while rather than at once.
			retry = retry || !wrote
		}
		var wake <-chan time.Time
		switch {
		case retry && (next.IsZero() || next.Sub(now) > janitorRetry):
			wake = clk.After(janitorRetry)
		case !next.IsZero():
			wake = clk.After(next.Sub(now))
		}
		select {
		case <-ctx.Done():
			return
		case <-live.Done():
			return
		case <-changed:
		case <-wake:
		}
	}
}
