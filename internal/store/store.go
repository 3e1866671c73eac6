// Package store holds what every storage engine of Countersign shares: the
// errors a store returns whatever its engine, and the encodings of the
// columns each keeps as JSON text (columns.go). The store interfaces
// themselves are declared by the domain packages that use them
// (queue.Store, account.Store, audit.Trail, queue.History); sqlq holds the
// SQL that is the same on both engines, written once; storetest is the
// suite that every implementation of them must pass.
package store

import "errors"

// ErrReplaced is returned by every write, and by reads that check, when the
// database is not the one the store opened: its file was removed or
// replaced, or it holds another identity. Nothing was changed.
var ErrReplaced = errors.New("store: the database was removed or replaced while the console was running")

// ErrUnavailable wraps storage failures that a client may retry later (disk
// full, read-only file, locked too long, connection lost).
var ErrUnavailable = errors.New("store: storage unavailable")

// ErrRolledBack is returned by a write whose commit left the audit chain
// behind the data directory's high-water mark (or on another history): the
// database was rolled back or replaced under the running console. The
// write was committed but is not acknowledged.
var ErrRolledBack = errors.New("store: the database's audit chain went back behind this data directory's high-water mark")
