//go:build !race

package emulator_test

// raceEnabled reports whether the race detector is on; it makes the largest
// tests several times slower, so they scale down.
const raceEnabled = false
