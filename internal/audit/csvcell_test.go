package audit

import "testing"

func TestCSVCell(t *testing.T) {
	for in, want := range map[string]string{"": "", "=1+2": "'=1+2", "+x": "'+x", "-x": "'-x", "@x": "'@x",
		"\tx": "'\tx", "\rx": "'\rx", "x=1": "x=1", "{\"a\":1}": "{\"a\":1}"} {
		if got := CSVCell(in); got != want {
			t.Errorf("CSVCell(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCSVCellFullWidth: the full-width ＝ ＋ － ＠, which spreadsheets may
// also read as the start of a formula, are escaped like their ASCII forms.
func TestCSVCellFullWidth(t *testing.T) {
	for in, want := range map[string]string{"＝HYPERLINK(\"x\")": "'＝HYPERLINK(\"x\")", "＋1": "'＋1", "－1": "'－1",
		"＠SUM(A1)": "'＠SUM(A1)", "a＝1": "a＝1", "ｘ": "ｘ"} {
		if got := CSVCell(in); got != want {
			t.Errorf("CSVCell(%q) = %q, want %q", in, got, want)
		}
	}
}
