package status

import "errors"

// ErrInvalidLanes means [Collect] was given a number of shared lanes below
// one. The lane of a shared subscriber depends on that number, so the report
// would name a lane no relay runs; the CLI validates --lanes before it gets
// here.
var ErrInvalidLanes = errors.New("status: the number of shared lanes must be at least 1")

// ErrDirectGet is returned when the server answers a direct get of the
// relay_ratelimit or relay_timeliness bucket with something that is
// neither a message nor the end of the batch: a report built on it would
// show wrong tokens, pauses, circuits or deadline counts, so it fails
// instead.
var ErrDirectGet = errors.New("status: direct get")

// errReadBudget stops a search for a subscriber's last dead letters that
// has used up [maxDeadReads]; the search keeps what it found.
var errReadBudget = errors.New("status: read budget used up")
