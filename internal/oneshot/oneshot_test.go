package oneshot_test

import (
	"testing"
	"time"

	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/oneshot/oneshottest"
)

func TestMemory(t *testing.T) {
	oneshottest.Run(t, func(t *testing.T, max int, now func() time.Time) oneshot.Store {
		return oneshot.NewMemory(max, now)
	})
}
