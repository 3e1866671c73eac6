package main

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// TestDeletedDatabaseRefusedAtStart: a data directory whose database file
// was deleted (or swapped for another) does not silently start over with an
// empty ledger.
func TestDeletedDatabaseRefusedAtStart(t *testing.T) {
	data := t.TempDir()
	tools := "../../examples/tools.yaml"
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := openApp(data, "", tools, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	// A restart on the same database is fine.
	if a, err = openApp(data, "", tools, nil, log); err != nil {
		t.Fatalf("restart: %v", err)
	}
	a.Close()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(dbPath(data) + suffix)
	}
	_, err = openApp(data, "", tools, nil, log)
	if err == nil || !strings.Contains(err.Error(), "is not the one this data directory was created with") {
		t.Fatalf("start after the database was deleted: %v, want a refusal", err)
	}
	// Starting over is a deliberate act.
	if err := os.Remove(identityPath(data)); err != nil {
		t.Fatal(err)
	}
	a, err = openApp(data, "", tools, nil, log)
	if err != nil {
		t.Fatalf("start after removing the identity file: %v", err)
	}
	a.Close()
}
