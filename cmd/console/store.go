package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/console"
	"github.com/countersign/countersign/internal/db"
	"github.com/countersign/countersign/internal/mcp/catalog"
	"github.com/countersign/countersign/internal/notify"
	"github.com/countersign/countersign/internal/pgstore"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/server"
)

// envDatabaseURL names the PostgreSQL database when --db is not given.
const envDatabaseURL = "COUNTERSIGN_DATABASE_URL"

// envTrustedKeys names the cluster's trust file when --trusted-keys is not
// given.
const envTrustedKeys = "COUNTERSIGN_TRUSTED_KEYS"

// trustedKeysPath is the trust file in force: the flag, then the
// environment; "" for none.
func trustedKeysPath(e *env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return e.getenv(envTrustedKeys)
}

// storage is what the commands use of either engine beside the domain's
// store interfaces.
type storage interface {
	audit.Trail
	queue.History
	Close() error
	Ping(ctx context.Context) error
	Identity() string
	AppendAudit(ctx context.Context, e *audit.Entry) error
	audit.CheckpointStore
	Verify(ctx context.Context, opts audit.VerifyOptions) (audit.VerifyResult, error)
	AuditHashAt(ctx context.Context, seq int64) (string, error)
	OnCommit(fn func(seq int64, head string) error)
	WriteCounts() (commits, writes int64)
}

// engine is an opened database, SQLite or PostgreSQL, with the stores the
// domain declares.
type engine struct {
	storage
	queue    queue.Store
	accounts account.Store
	catalog  catalog.Store
	outbox   outboxStore
	where    string      // the file, or the URL without its password
	pg       *pgstore.DB // nil on SQLite
}

const dbFlagUsage = "PostgreSQL database shared by every replica, postgres://USER@HOST/DB " +
	"(default $" + envDatabaseURL + "; without either, SQLite in the data directory)"

// outboxStore is the notification outbox with the browsers' push
// subscriptions.
type outboxStore interface {
	notify.Outbox
	notify.Subscriptions
	console.PushSubscriptions
}

// dbFlag registers --db on a command.
func dbFlag(fs *flag.FlagSet) *string { return fs.String("db", "", dbFlagUsage) }

// databaseURL is the PostgreSQL URL in force: the flag, then the
// environment; "" means SQLite in the data directory.
func databaseURL(e *env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	return e.getenv(envDatabaseURL)
}

// openStore opens the data directory's database: PostgreSQL when url is
// set, else SQLite in the directory, creating both if needed. The
// directory holds keys (and the SQLite database): it is made owner-only
// whatever mode it was created with, and the database must be the one it
// was created with. Only the commands that set a console up use it
// (serve, demo, user add and token create, those two only in a directory
// that is there or the default one (setupDirMissing), and keys rotate on a
// keyring that is there); every other command opens with openExisting.
func openStore(ctx context.Context, data, url string) (*engine, error) {
	if err := makeDataDir(data); err != nil {
		return nil, err
	}
	return openDatabase(ctx, data, url, true)
}

// openDatabase opens the database of a data directory that is there. With
// record, a directory that has not recorded its database yet records it;
// without, it is left as it is.
func openDatabase(ctx context.Context, data, url string, record bool) (*engine, error) {
	if err := os.Chmod(data, 0o700); err != nil {
		return nil, fmt.Errorf("restrict data directory %s: %w", data, err)
	}
	var en *engine
	if url != "" {
		if !pgstore.IsURL(url) {
			return nil, fmt.Errorf("--db must be a postgres:// or postgresql:// URL")
		}
		d, err := pgstore.Open(ctx, url, pgstore.Options{})
		if err != nil {
			return nil, err
		}
		en = pgEngine(d)
	} else {
		d, err := db.Open(dbPath(data))
		if err != nil {
			return nil, err
		}
		en = sqliteEngine(d)
	}
	if err := checkDatabaseIdentity(data, en, record); err != nil {
		en.Close()
		return nil, err
	}
	return en, nil
}

// notADirectory refuses a --data that names a file.
func notADirectory(data string) error {
	if fi, err := os.Stat(data); err == nil && !fi.IsDir() {
		return fmt.Errorf("--data %s is a file, not a directory: pass the console's data directory", data)
	}
	return nil
}

// makeDataDir creates the data directory if it is missing.
func makeDataDir(data string) error {
	if err := notADirectory(data); err != nil {
		return err
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		return fmt.Errorf("create data directory %s: %w", data, err)
	}
	return nil
}

// openExisting is openStore for commands that act on a console that must
// already exist. It creates nothing: not the data directory, not a SQLite
// database, not the database-identity file. A mistyped --data is refused
// (databaseExists) rather than made, even when the database itself is a
// shared PostgreSQL one that opens from anywhere.
func openExisting(ctx context.Context, data, url string) (*engine, error) {
	if err := databaseExists(data, url); err != nil {
		return nil, err
	}
	return openDatabase(ctx, data, url, false)
}

// databaseExists refuses, opening and creating nothing, a data directory
// that is a file or is missing; on SQLite (url empty), one without a
// database; on PostgreSQL, one that has not recorded which database it
// belongs to (its database-identity file), since the shared database
// would open from a mistyped directory as well as from the right one.
func databaseExists(data, url string) error {
	if err := notADirectory(data); err != nil {
		return err
	}
	if url == "" {
		return sqliteExists(data)
	}
	if _, err := os.Stat(data); err != nil {
		return fmt.Errorf("no data directory at %s; nothing was created or changed. Check that --data (or $COUNTERSIGN_DATA) "+
			"names this console's data directory: a replica's directory is made by console keys init --data DIR "+
			"or by the first console serve --data DIR --db URL", data)
	}
	if _, err := os.Stat(identityPath(data)); err != nil {
		return fmt.Errorf("%s has no %s, so no console has used it with a database yet; nothing was created or changed. "+
			"Check that --data (or $COUNTERSIGN_DATA) names this console's data directory; a new replica's directory "+
			"is bound to its database by its first console serve --data %s --db URL, or at once by console keys init --data %s --db URL",
			data, filepath.Base(identityPath(data)), data, data)
	}
	return nil
}

// sqliteExists refuses a data directory without a SQLite database, saying
// which file was expected.
func sqliteExists(data string) error {
	if _, err := os.Stat(dbPath(data)); err != nil {
		where := dbPath(data)
		if _, err := os.Stat(data); err != nil {
			where += " (there is no directory " + data + ")"
		}
		return fmt.Errorf("no database at %s: check that --data (or $COUNTERSIGN_DATA) names the console's data directory; "+
			"pass --data DIR of a console that has run (console serve creates its database there), or --db URL", where)
	}
	return nil
}

// namedDirMissing refuses a data directory named by --data (flagValue) or
// $COUNTERSIGN_DATA that is not there; the default one may be missing.
func namedDirMissing(e *env, flagValue string) error {
	if flagValue == "" && e.getenv("COUNTERSIGN_DATA") == "" {
		return nil
	}
	data := dataDir(e, flagValue)
	if err := notADirectory(data); err != nil {
		return err
	}
	if _, err := os.Stat(data); err != nil {
		return fmt.Errorf("no data directory at %s", data)
	}
	return nil
}

// setupDirMissing refuses, for the commands that set a console up in its
// data directory besides serve (user add, token create), a directory named
// by --data (flagValue) or $COUNTERSIGN_DATA that is not there: a mistyped
// name would otherwise become a fresh, empty console that nothing serves,
// with the account or token in it. A directory that is there is set up as
// before, empty or not: the documented first steps run console serve first,
// and a directory made on purpose (mkdir, a service manager's state
// directory, keys init) exists before anything is put in it. The default
// ./countersign-data, which nobody types, may still be made.
func setupDirMissing(e *env, flagValue string) error {
	if err := namedDirMissing(e, flagValue); err != nil {
		data := dataDir(e, flagValue)
		return fmt.Errorf("no data directory at %s; nothing was created. Check that --data (or $COUNTERSIGN_DATA) names this "+
			"console's data directory. A new console's directory is made by its first console serve --data %s "+
			"(or console keys init --data %s); run this command after it", data, data, data)
	}
	return nil
}

// openReadOnly opens an existing database for reading only, without
// migrating it or taking any write lock: for verifying and exporting while
// the server runs.
func openReadOnly(ctx context.Context, data, url string) (*engine, error) {
	if url != "" {
		if !pgstore.IsURL(url) {
			return nil, fmt.Errorf("--db must be a postgres:// or postgresql:// URL")
		}
		d, err := pgstore.Open(ctx, url, pgstore.Options{ReadOnly: true, MaxConns: 4})
		if err != nil {
			return nil, err
		}
		return pgEngine(d), nil
	}
	if err := notADirectory(data); err != nil {
		return nil, err
	}
	if err := sqliteExists(data); err != nil {
		return nil, err
	}
	d, err := db.OpenReadOnly(dbPath(data))
	if err != nil {
		return nil, err
	}
	return sqliteEngine(d), nil
}

// writeCounter is the database itself as the server counts its work:
// *db.DB counts its statements too, which the server then exports.
func (e *engine) writeCounter() server.WriteCounter { return e.storage }

func sqliteEngine(d *db.DB) *engine {
	return &engine{storage: d, queue: d.Store(), accounts: d.Accounts(), catalog: d.Catalog(), outbox: d.Outbox(), where: d.Path()}
}

func pgEngine(d *pgstore.DB) *engine {
	return &engine{storage: d, queue: d.Store(), accounts: d.Accounts(), catalog: d.Catalog(), outbox: d.Outbox(), where: d.Location(), pg: d}
}
