package status

import "errors"

// ErrInvalidLanes means [Collect] was given a number of shared lanes below
// one. The lane of a shared subscriber depends on that number, so the report
// would name a lane no relay runs; the CLI validates --lanes before it gets
// here.
var ErrInvalidLanes = errors.New("the number of shared lanes must be at least 1")

// errReadBudget stops a search for a subscriber's last dead letters that
// has used up [maxDeadReads]; the search keeps what it found.
var errReadBudget = errors.New("read budget used up")
