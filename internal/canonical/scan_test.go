package canonical

import (
	"encoding/binary"
	"testing"

	"pgregory.net/rapid"
)

// checkSpecialBytes compares specialBytes and firstSpecial on eight bytes
// with the byte-at-a-time rule.
func checkSpecialBytes(t interface{ Fatalf(string, ...any) }, b []byte) {
	first := -1
	for i, c := range b {
		if stringSpecial[c] {
			first = i
			break
		}
	}
	m := specialBytes(loadBytes(b, 0))
	if (m == 0) != (first < 0) || (m != 0 && firstSpecial(m) != first) {
		t.Fatalf("specialBytes(% x) = %#x, want the first special byte at %d", b, m, first)
	}
}

func TestStringSpecial(t *testing.T) {
	for c := 0; c < 256; c++ {
		want := c < 0x20 || c == '"' || c == '\\'
		if stringSpecial[c] != want {
			t.Errorf("stringSpecial[0x%02x] = %v, want %v", c, stringSpecial[c], want)
		}
	}
}

// TestSpecialBytesEveryByte puts every byte value at every position of words
// filled with each other byte value.
func TestSpecialBytesEveryByte(t *testing.T) {
	var b [8]byte
	for fill := 0; fill < 256; fill++ {
		for pos := 0; pos < 8; pos++ {
			for c := 0; c < 256; c++ {
				for i := range b {
					b[i] = byte(fill)
				}
				b[pos] = byte(c)
				x := binary.LittleEndian.Uint64(b[:])
				checkSpecialBytes(t, b[:])
				if got := loadString(string(b[:]), 0); got != x {
					t.Fatalf("loadString(% x) = %#x, want %#x", b, got, x)
				}
			}
		}
	}
}

func TestSpecialBytesRandom(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := rapid.SliceOfN(rapid.Byte(), 8, 8).Draw(t, "bytes")
		checkSpecialBytes(t, b)
	})
}
