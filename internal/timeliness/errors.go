package timeliness

import (
	"errors"

	"github.com/relay-dev/relay/streams"
)

// ErrNoBucket is returned by [Recorder.Run] and [Recorder.Flush] of a
// Recorder made without a bucket: it would count deliveries that no report
// could ever show, so it refuses to start instead.
var ErrNoBucket = errors.New("timeliness: no " + streams.TimelinessBucket + " bucket")

// ErrCorrupt means a relay_timeliness value is not the JSON of [Counts]:
// something other than relay wrote it. A flush starts such a subscriber
// over from its own counts rather than stop counting it for good.
var ErrCorrupt = errors.New("timeliness: value is not {\"met\":N,\"missed\":M}")

// ErrContended means a flush lost the compare-and-set of a subscriber's
// counts to other relays [casAttempts] times in a row; the counts are kept
// for the next flush, when the others will have written theirs.
var ErrContended = errors.New("timeliness: compare-and-set lost too often")
