package canonical

import (
	"encoding/binary"
	"math/bits"
)

// Word-at-a-time scanning of string contents: eight bytes are checked at
// once for the bytes that need attention inside a JSON string.

const (
	lowBits  = 0x0101010101010101
	highBits = 0x8080808080808080
)

// specialBytes returns a mask whose lowest set bit is the top bit of the
// first byte of x (little-endian) that is a quote, a backslash or a control
// character below 0x20, and zero when x has none: all eight bytes are ones a
// JSON string holds as they are. Bits above the lowest may be spurious (a
// borrow carries into the next byte only after a match), so only the lowest
// is used.
func specialBytes(x uint64) uint64 {
	quote := x ^ (lowBits * '"')
	backslash := x ^ (lowBits * '\\')
	control := (x - lowBits*0x20) &^ x
	return (control | (quote-lowBits)&^quote | (backslash-lowBits)&^backslash) & highBits
}

// firstSpecial returns the index (0 to 7) of the byte that a non-zero
// specialBytes mask marks first.
func firstSpecial(mask uint64) int { return bits.TrailingZeros64(mask) / 8 }

// loadString returns the eight bytes of s from i as a little-endian word;
// the compiler turns it into one load.
func loadString(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}

func loadBytes(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }
