package testkit

import (
	"os"
	"testing"
)

// AllRequired reports whether every test must run: under CI=true, and under
// COUNTERSIGN_TEST_ALL=1, which make test sets. Then a test whose tool or
// package is missing fails, saying how to install it, instead of skipping.
func AllRequired() bool {
	return os.Getenv("CI") == "true" || os.Getenv("COUNTERSIGN_TEST_ALL") == "1"
}

// Need stops a test that cannot run here for want of what msg names (msg
// says how to install it): it fails when AllRequired, and is skipped with
// msg otherwise (a bare go test on a machine without the tool).
func Need(tb testing.TB, msg string) {
	tb.Helper()
	if AllRequired() {
		tb.Fatalf("%s (make test and CI run every test; .ci/run installs everything they need)", msg)
	}
	tb.Skip(msg)
}
