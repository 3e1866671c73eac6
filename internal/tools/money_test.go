package tools

import (
	"math"
	"testing"
)

func TestFormatMoney(t *testing.T) {
	tests := []struct {
		amount   int64
		currency string
		want     string
	}{
		{123456, "USD", "USD 1,234.56"},
		{123456, "EUR", "EUR 1,234.56"},
		{1234, "JPY", "JPY 1,234"},
		{0, "USD", "USD 0.00"},
		{5, "USD", "USD 0.05"},
		{99, "USD", "USD 0.99"},
		{100, "USD", "USD 1.00"},
		{-5, "USD", "USD -0.05"},
		{-123456, "USD", "USD -1,234.56"},
		{5000000, "USD", "USD 50,000.00"},
		{100000000, "USD", "USD 1,000,000.00"},
		{999, "JPY", "JPY 999"},
		{1000, "JPY", "JPY 1,000"},
		{-1000000, "JPY", "JPY -1,000,000"},
		{1500, "KWD", "KWD 1.500"},
		{1, "KWD", "KWD 0.001"},
		{12345, "CLF", "CLF 1.2345"},
		{123456, "XYZ", "XYZ 1,234.56"},
		{123456, "", " 1,234.56"},
		{math.MaxInt64, "USD", "USD 92,233,720,368,547,758.07"},
		{math.MinInt64, "USD", "USD -92,233,720,368,547,758.08"},
		{math.MinInt64, "JPY", "JPY -9,223,372,036,854,775,808"},
	}
	for _, tt := range tests {
		if got := FormatMoney(tt.amount, tt.currency); got != tt.want {
			t.Errorf("FormatMoney(%d, %q) = %q, want %q", tt.amount, tt.currency, got, tt.want)
		}
	}
}
