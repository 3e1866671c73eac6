package plan

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
)

// The expected bytes are spelled out by hand from the contract so a change to
// the prefix, the member names, their order or the version fails here.
func TestDigestMatchesContract(t *testing.T) {
	a := "aa" + fmt.Sprintf("%062d", 1)
	b := "bb" + fmt.Sprintf("%062d", 2)
	for _, ordered := range []bool{true, false} {
		got, err := Digest(ordered, []string{a, b})
		if err != nil {
			t.Fatal(err)
		}
		canon := fmt.Sprintf(`{"items":["%s","%s"],"ordered":%t,"v":1}`, a, b, ordered)
		sum := sha256.Sum256([]byte("countersign/v1/plan:" + canon))
		if want := hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("ordered=%t: digest %s, want %s over %s", ordered, got, want, canon)
		}
	}
}

func TestDigestDependsOnOrderAndFlag(t *testing.T) {
	ab, _ := Digest(false, []string{"a", "b"})
	ba, _ := Digest(false, []string{"b", "a"})
	abOrdered, _ := Digest(true, []string{"a", "b"})
	if ab == ba || ab == abOrdered {
		t.Fatalf("digest ignores item order or the ordered flag: %s %s %s", ab, ba, abOrdered)
	}
}

func TestCheckRefusesBadItemLists(t *testing.T) {
	many := make([]string, MaxItems+1)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for name, items := range map[string][]string{
		"empty":     nil,
		"too many":  many,
		"duplicate": {"x", "y", "x"},
	} {
		if _, err := Digest(false, items); !errors.Is(err, ErrShape) {
			t.Errorf("%s: err = %v, want ErrShape", name, err)
		}
	}
	if err := Check(many[:MaxItems]); err != nil {
		t.Errorf("%d distinct items refused: %v", MaxItems, err)
	}
}
