package console

import (
	"os"
	"testing"

	"github.com/countersign/countersign/internal/pgtest"
)

// The replica tests start PostgreSQL; pgtest.Main stops it afterwards.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
