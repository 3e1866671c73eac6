//go:build race

package console

// raceDetector tells a test that the race detector is on: it makes
// allocations of its own (sync.Pool drops what it holds at random), so
// allocation counts are taken without it.
const raceDetector = true
