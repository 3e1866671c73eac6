package sqlitekit_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/testkit"
	"github.com/countersign/countersign/internal/testkit/sqlitekit"
)

const refund = `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1299,"currency":"EUR","reason_code":"duplicate","notes":"charged twice"}}`

// The queue runs on the kit's clock, over the file it names, and the
// test's cleanup closes the database.
func TestNewQueue(t *testing.T) {
	var q *sqlitekit.Queue
	t.Run("build", func(t *testing.T) {
		q = sqlitekit.NewQueue(t)
		if _, ok := q.Tools.Tool("payments.refund"); !ok {
			t.Fatal("examples/tools.yaml is not loaded: no payments.refund")
		}
		q.Clock.Advance(time.Minute)
		c, created, err := q.Service.Submit(context.Background(), queue.Principal{Actor: "agent:a", Audience: "payments-host"}, []byte(refund))
		if err != nil || !created {
			t.Fatalf("Submit: created %t, %v", created, err)
		}
		if want := sqlitekit.T0.Add(time.Minute); !c.CreatedAt.Equal(want) {
			t.Errorf("CreatedAt = %v, want the kit's clock, %v", c.CreatedAt, want)
		}
		if got, want := filepath.Base(q.Path), "countersign.db"; got != want {
			t.Errorf("Path = %s, want a file named %s", got, want)
		}
	})
	// The pool itself, not the file: the temporary directory is gone too.
	if err := q.DB.SQL().Ping(); err == nil || !strings.Contains(err.Error(), "database is closed") {
		t.Errorf("after the test that built it ended, Ping() = %v, want the database closed", err)
	}
}

// WithPath reopens a file; WithClock replaces the clock.
func TestNewQueueOptions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	var id string
	t.Run("first", func(t *testing.T) {
		q := sqlitekit.NewQueue(t, sqlitekit.WithPath(path))
		c, _, err := q.Service.Submit(context.Background(), queue.Principal{Actor: "agent:a", Audience: "payments-host"}, []byte(refund))
		if err != nil {
			t.Fatal(err)
		}
		id = c.ID
	})
	clk := testkit.NewClock(sqlitekit.T0.Add(time.Hour))
	q := sqlitekit.NewQueue(t, sqlitekit.WithPath(path), sqlitekit.WithClock(clk))
	if q.Clock != clk {
		t.Error("WithClock: the Queue does not hold the clock given")
	}
	if _, err := q.Service.Call(context.Background(), id); err != nil {
		t.Errorf("reopened %s: call %s: %v", path, id, err)
	}
}
