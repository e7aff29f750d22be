package metrics

// Rank chooses the top subscribers at once, as every RankEvery does.
func (m *Metrics) Rank() { m.subs.rank() }

// Forget deletes the series of the subscribers inView does not hold at
// once, as every RankEvery does.
func (m *Metrics) Forget(inView func(id string) bool) { m.subs.forget(inView) }
