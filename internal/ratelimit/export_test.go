package ratelimit

import "time"

// FreshAge is how long ago s's watch was last known fresh (see
// Shared.stale), for tests that drive the clock by hand faster than the
// checks that keep it fresh can follow.
func FreshAge(s *Shared) time.Duration { return s.age() }
