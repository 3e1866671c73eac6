package tools

import (
	"strconv"
	"strings"
)

// minorUnits lists the ISO 4217 currencies whose minor unit is not 1/100.
// Every other code, known or not, is shown with two decimals.
var minorUnits = map[string]int{
	// no minor unit
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0,
	"PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	// thousandths
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	// ten-thousandths
	"CLF": 4, "UYW": 4,
}

// FormatMoney shows an integer amount of minor units with its currency
// code: "USD 1,234.56", "JPY 1,234", "KWD 1.500", "USD -0.05". A currency
// without a known minor unit is shown with two decimals.
func FormatMoney(amountMinor int64, currency string) string {
	digits := minorUnits[currency]
	if _, known := minorUnits[currency]; !known {
		digits = 2
	}
	neg := amountMinor < 0
	// uint64 holds the magnitude of every int64, math.MinInt64 included.
	mag := uint64(amountMinor)
	if neg {
		mag = -mag
	}
	s := strconv.FormatUint(mag, 10)
	if len(s) <= digits {
		s = strings.Repeat("0", digits-len(s)+1) + s
	}
	whole, frac := s[:len(s)-digits], s[len(s)-digits:]

	var b strings.Builder
	b.WriteString(currency)
	b.WriteByte(' ')
	if neg {
		b.WriteByte('-')
	}
	for i, c := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if digits > 0 {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	return b.String()
}
