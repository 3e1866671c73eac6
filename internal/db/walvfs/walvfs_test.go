//go:build unix

package walvfs_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/db/walvfs"
)

// Environment of the child process TestKilledWhileCommitting starts: the
// test binary runs itself again with childEnv set to the database path.
const childEnv = "COUNTERSIGN_WALVFS_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(childEnv); path != "" {
		os.Exit(childCommitLoop(path))
	}
	os.Exit(m.Run())
}

// dsn is the URI of the database at path as Countersign opens it (db.DSN),
// through the VFS when gather is true, through SQLite's own otherwise.
func dsn(path string, gather bool, synchronous string) string {
	s := "file:" + path + "?_journal_mode=WAL&_synchronous=" + synchronous + "&_busy_timeout=10000&_txlock=immediate"
	if gather {
		s += "&vfs=" + walvfs.Name()
	}
	return s
}

func open(t *testing.T, path string, gather bool, synchronous string) *sql.DB {
	t.Helper()
	d, err := sql.Open("sqlite3", dsn(path, gather, synchronous))
	if err != nil {
		t.Fatal(err)
	}
	d.SetMaxOpenConns(1)
	t.Cleanup(func() { d.Close() })
	return d
}

func mustExec(t *testing.T, d *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := d.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// insertRows inserts n rows of size bytes each, with ids from first, in
// one transaction, and returns how many WAL writes SQLite asked for and how
// many were made.
func insertRows(t *testing.T, d *sql.DB, first, n, size int) (received, issued int64) {
	t.Helper()
	r0, i0 := walvfs.Counts()
	tx, err := d.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for i := first; i < first+n; i++ {
		if _, err := tx.Exec(`INSERT INTO t (id, v) VALUES (?, ?)`, i, payload(i, size)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r1, i1 := walvfs.Counts()
	return r1 - r0, i1 - i0
}

// payload is row i's value: size bytes that differ from row to row.
func payload(i, size int) []byte {
	return bytes.Repeat([]byte(strconv.Itoa(i)+"."), size)[:size]
}

func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// maxWrite is the most the unix VFS writes in one call, and so the most the
// VFS gathers into one write.
const maxWrite = 0x1ffff

// TestFramesWrittenOncePerCommit runs write transactions through the VFS
// and fails if their WAL frames are written one by one: SQLite asks for two
// writes per frame (its header, its page), and the VFS makes one per commit.
func TestFramesWrittenOncePerCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	d := open(t, path, true, "FULL")
	mustExec(t, d, `CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)`)
	mustExec(t, d, `CREATE INDEX t_v ON t (v)`)
	var pageSize int64
	if err := d.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	next := 0
	for _, tc := range []struct {
		name       string
		rows, size int
	}{
		{"one row", 1, 100},
		{"a few pages", 8, 1500},
		{"many pages", 60, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, counted := walSize(t, path), walvfs.Frames()
			received, issued := insertRows(t, d, next, tc.rows, tc.size)
			next += tc.rows
			frames := (walSize(t, path) - before) / (pageSize + 24)
			if frames < 1 || received != 2*frames {
				t.Fatalf("%d frames appended, %d writes asked for: want two per frame", frames, received)
			}
			// What the console exports as countersign_store_wal_frames_total.
			if n := walvfs.Frames() - counted; n != frames {
				t.Errorf("Frames counted %d, the log grew by %d frames", n, frames)
			}
			// One write per commit, or per 128 KiB of frames: the largest
			// write the unix VFS makes in one call.
			perWrite := maxWrite / (pageSize + 24)
			if want := (frames + perWrite - 1) / perWrite; issued != want {
				t.Errorf("%d frames: %d writes issued, want %d (received %d)", frames, issued, want, received)
			}
		})
	}
	var n int
	if err := d.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 69 {
		t.Fatalf("count = %d, %v; want 69", n, err)
	}
}

// TestCommittedDataSeenAtOnce commits through the VFS and reads, right
// after each commit, through another connection that opens the database
// with SQLite's own VFS, as a process without the VFS would. At
// synchronous=NORMAL no sync follows the commit: what makes its frames
// readable is that the commit frame's write issues them.
func TestCommittedDataSeenAtOnce(t *testing.T) {
	for _, sync := range []string{"FULL", "NORMAL"} {
		t.Run(sync, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.db")
			w := open(t, path, true, sync)
			mustExec(t, w, `CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)`)
			r := open(t, path, false, sync)
			next := 0
			for round := range 20 {
				rows := 1 + round%7
				insertRows(t, w, next, rows, 300+round*200)
				next += rows
				var n int
				var sum int64
				if err := r.QueryRow(`SELECT count(*), coalesce(sum(length(v)), 0) FROM t`).Scan(&n, &sum); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if n != next {
					t.Fatalf("round %d: the other connection counts %d rows, want %d", round, n, next)
				}
			}
			var ok string
			if err := r.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
				t.Fatalf("integrity_check = %q, %v", ok, err)
			}
		})
	}
}

// TestSpilledTransactions runs transactions larger than the page cache, so
// that SQLite writes frames before the commit, reads them back and rewrites
// frames in place (their checksums recomputed at commit), then checks what
// another connection without the VFS reads.
func TestSpilledTransactions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	w := open(t, path, true, "FULL")
	mustExec(t, w, `PRAGMA cache_size = 10`)
	mustExec(t, w, `CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)`)
	mustExec(t, w, `CREATE INDEX t_v ON t (v)`)
	insertRows(t, w, 0, 400, 900)
	// Update what the transaction above wrote, twice in one transaction:
	// pages written before the commit are written again in place.
	tx, err := w.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := tx.Exec(`UPDATE t SET v = v || 'x'`); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := open(t, path, false, "FULL")
	var n, bad int
	if err := r.QueryRow(`SELECT count(*), sum(v != substr(v, 1, 900) || 'xx') FROM t`).Scan(&n, &bad); err != nil {
		t.Fatal(err)
	}
	if n != 400 || bad != 0 {
		t.Fatalf("%d rows, %d not as updated; want 400, 0", n, bad)
	}
	var ok string
	if err := r.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
		t.Fatalf("integrity_check = %q, %v", ok, err)
	}
}

// childCommitLoop commits transactions of varied sizes through the VFS,
// some larger than its page cache, printing each one's first id once it is
// committed, until it is killed.
func childCommitLoop(path string) int {
	d, err := sql.Open("sqlite3", dsn(path, true, "FULL"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	d.SetMaxOpenConns(1)
	ctx := context.Background()
	conn, err := d.Conn(ctx)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if _, err := conn.ExecContext(ctx, `PRAGMA cache_size = 20`); err != nil {
		fmt.Println("error", err)
		return 1
	}
	var next int
	if err := conn.QueryRowContext(ctx, `SELECT coalesce(max(id) + 1, 0) FROM t`).Scan(&next); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("ready")
	for k := 0; ; k++ {
		rows := 1 + k%5
		if k%17 == 0 {
			rows = 150 // spills: frames written, read back and rewritten before the commit
		}
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		for i := next; i < next+rows; i++ {
			if _, err := tx.Exec(`INSERT INTO t (id, v) VALUES (?, ?)`, i, payload(i, 200+i%1800)); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		if k%3 == 0 {
			if _, err := tx.Exec(`UPDATE t SET v = v WHERE id >= ?`, next-10); err != nil {
				fmt.Println("error", err)
				return 1
			}
		}
		if err := tx.Commit(); err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Printf("committed %d %d\n", next, rows)
		next += rows
	}
}

// TestKilledWhileCommitting kills a process with SIGKILL while it commits
// transactions through the VFS, again and again, and after each kill
// reopens the database: every commit the process acknowledged is there,
// whole, nothing else but at most the transaction it was committing, and
// the database passes integrity_check.
func TestKilledWhileCommitting(t *testing.T) {
	kills := 12
	if testing.Short() {
		kills = 3
	}
	path := filepath.Join(t.TempDir(), "t.db")
	{
		d := open(t, path, true, "FULL")
		mustExec(t, d, `CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)`)
		mustExec(t, d, `CREATE INDEX t_v ON t (v)`)
		d.Close()
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	acked := 0 // every id below this was acknowledged
	for kill := range kills {
		lines := runAndKill(t, path, time.Duration(rng.IntN(300))*time.Millisecond)
		for _, line := range lines {
			var first, rows int
			if _, err := fmt.Sscanf(line, "committed %d %d", &first, &rows); err != nil {
				t.Fatalf("kill %d: child wrote %q", kill, line)
			}
			if first != acked {
				t.Fatalf("kill %d: child committed from %d, want %d", kill, first, acked)
			}
			acked = first + rows
		}
		d := open(t, path, true, "FULL")
		var ok string
		if err := d.QueryRow(`PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
			t.Fatalf("kill %d: integrity_check = %q, %v", kill, ok, err)
		}
		var n, maxID, wrong int
		if err := d.QueryRow(`SELECT count(*), coalesce(max(id), -1) FROM t`).Scan(&n, &maxID); err != nil {
			t.Fatal(err)
		}
		if n != maxID+1 || n < acked {
			t.Fatalf("kill %d: %d rows up to id %d; %d acknowledged", kill, n, maxID, acked)
		}
		rows, err := d.Query(`SELECT id, v FROM t WHERE id >= ?`, max(0, acked-200))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int
			var v []byte
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(v, payload(id, 200+id%1800)) {
				wrong++
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		rows.Close()
		if wrong != 0 {
			t.Fatalf("kill %d: %d rows differ from what was written", kill, wrong)
		}
		// A transaction committed but not yet acknowledged when the kill
		// came is there whole; the next child goes on after it.
		acked = n
		d.Close()
		t.Logf("kill %d: %d lines, %d rows", kill, len(lines), n)
	}
	if acked < 50 {
		t.Errorf("only %d rows committed over %d kills: the children hardly ran", acked, kills)
	}
}

// runAndKill starts the child on the database at path, waits until it is
// ready, lets it commit for delay, kills it with SIGKILL and returns the
// commits it acknowledged.
func runAndKill(t *testing.T, path string, delay time.Duration) []string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	if !sc.Scan() || sc.Text() != "ready" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child's first line %q, want ready", sc.Text())
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var got []string
	// Kill after delay, or once the child has acknowledged a few commits,
	// whichever comes later, so that every kill lands among commits.
	killAt := time.After(delay)
	for timeUp := false; !timeUp || len(got) < 3; {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("child ended before it was killed: %v (%q)", cmd.Wait(), got)
			}
			if strings.HasPrefix(line, "error") {
				t.Fatalf("child: %s", line)
			}
			got = append(got, line)
		case <-killAt:
			timeUp = true
			killAt = nil
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for line := range lines {
		got = append(got, line)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want killed by SIGKILL", err)
	}
	return got
}
