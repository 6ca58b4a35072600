package delivery

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// retryDelay is the wait before retrying a notification after its n-th
// transient failure (n ≥ 1): exponential backoff with "full jitter", a
// uniformly random value in [base/10, min(cap, base·2^(n-1))]. Full jitter
// spreads the retries of many messages that failed together (a 5xx storm)
// over the whole window, so they do not come back as a thundering herd.
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

// retryUntil runs op until it succeeds or ctx ends, waiting between tries
// with cenkalti/backoff's jittered exponential backoff from initial up to
// max, and no limit on the total time. notify (optional) hears each
// failure. It returns op's last error when ctx ended first.
func retryUntil(ctx context.Context, initial, max time.Duration, op func() error, notify func(error)) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval, b.Multiplier = initial, max, 2
	opts := []backoff.RetryOption{backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0)}
	if notify != nil {
		opts = append(opts, backoff.WithNotify(func(err error, _ time.Duration) { notify(err) }))
	}
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = op()
		return struct{}{}, last
	}, opts...)
	if err != nil && last != nil {
		return last
	}
	return err
}

// retryTimes runs op up to n times, interval apart (with jitter), until it
// succeeds or ctx ends, and returns its last error.
func retryTimes(ctx context.Context, n uint, interval time.Duration, op func() error) error {
	b := backoff.NewConstantBackOff(interval)
	_, err := backoff.Retry(ctx, func() (struct{}, error) { return struct{}{}, op() },
		backoff.WithBackOff(b), backoff.WithMaxTries(n), backoff.WithMaxElapsedTime(0))
	return err
}
