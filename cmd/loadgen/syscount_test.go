package main

import "testing"

func TestParsePerfStat(t *testing.T) {
	out := `# started on Sat Dec  5 18:06:39 2026

1258,,syscalls:sys_enter_fsync,1054563687,100.00,,
1200,,syscalls:sys_enter_fdatasync,1054563687,100.00,,
37443,,syscalls:sys_enter_pwrite64,1054563687,100.00,,
18001,,syscalls:sys_enter_pwrite64,1054563687,100.00,,
`
	c, err := parsePerfStat([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	want := syscallCounts{Fsync: 1258, Fdatasync: 1200, Pwrite: 37443, WALWrites: 18001}
	if c != want || c.Syncs() != 2458 {
		t.Fatalf("parsed %+v, want %+v", c, want)
	}
	if _, err := parsePerfStat([]byte("1258,,syscalls:sys_enter_fsync,1,100.00,,\n")); err == nil {
		t.Fatal("output without the two pwrite64 counts parsed")
	}
	if _, err := parsePerfStat([]byte("<not counted>,,syscalls:sys_enter_fsync,1,100.00,,\n")); err == nil {
		t.Fatal("an uncounted event parsed as a number")
	}
}
