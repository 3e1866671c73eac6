package console

import "testing"

func TestIsCurrencyCode(t *testing.T) {
	for s, want := range map[string]bool{"USD": true, "JPY": true, "usd": false, "US": false, "USD ": false,
		"USD 9.99 ≈": false, "ＵＳＤ": false, "": false} {
		if got := isCurrencyCode(s); got != want {
			t.Errorf("isCurrencyCode(%q) = %v, want %v", s, got, want)
		}
	}
}
