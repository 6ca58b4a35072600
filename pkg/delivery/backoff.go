package delivery

import "time"

// retryDelay is the wait before retrying after the n-th transient failure
// (n ≥ 1): exponential backoff with "full jitter", a uniformly random value
// in [0, min(cap, base·2^(n-1))]. Full jitter spreads the retries of many
// messages that failed together (a 5xx storm) over the whole window, so they
// do not come back as a thundering herd.
//
// The attempt number comes from persisted state (notify_attempts), so the
// delay has to be a function of n rather than the next value of a stateful
// iterator such as cenkalti/backoff's; this is that function, with a floor of
// a tenth of the base so a retry is never immediate.
func retryDelay(n int, base, cap time.Duration, randN func(int64) int64) time.Duration {
	ceil := base
	for i := 1; i < n && ceil < cap; i++ {
		ceil *= 2
	}
	ceil = min(ceil, cap)
	floor := base / 10
	if ceil <= floor {
		return floor
	}
	return floor + time.Duration(randN(int64(ceil-floor)+1))
}
