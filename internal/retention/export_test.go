package retention

import "context"

// Pass makes one pass of k, as Run does every Interval, and returns the
// sequence it purged below (0: none).
func Pass(ctx context.Context, k *Keeper) (uint64, error) { return k.pass(ctx) }

// BodyPass makes one pass of k, as Run does every BodyInterval, and returns
// the sequence it purged below (0: none).
func BodyPass(ctx context.Context, k *BodyKeeper) (uint64, error) { return k.pass(ctx) }
