// Package present proves what a decision page showed. A page that offers a
// decision carries a presentation token: an HMAC-SHA256, under a secret of
// the console, over the page's kind, the person viewing it, when it was
// rendered and every (call, digest) pair it showed. The decision request
// returns the token and the decision's transaction checks it against the
// calls and digests it decides and the person deciding, then records what
// was presented. Rendering a page stores nothing.
//
// A token is "p1.KIND.MILLIS.MAC": the kind and the rendering time in Unix
// milliseconds in the clear (the verifier needs them to recompute the MAC),
// the MAC in unpadded base64url.
package present

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Page kinds: what kind of page presented the decision.
const (
	PageCall  = "call"  // one call's page (a click or a passkey)
	PageBatch = "batch" // the review page of a batch of calls
	// PageAllowance is the page that gives or confirms an allowance: its
	// base call and the scope (ScopeItem) it showed.
	PageAllowance = "allowance"
	// PageCounter is the review page of a counter-proposal: the call it
	// answers and the edited call's digest (CounterItem).
	PageCounter = "counter"
	// PageListing is a queue listing of the operator API: one call and the
	// digest it listed, for the person whose operator token asked. It
	// proves which listing an approval names, never that a person read it.
	PageListing = "listing"
	// PagePlan is a plan's page: every item with its digest, and the plan
	// digest (PlanItem) approved once.
	PagePlan = "plan"
)

// PlanItem is the plan digest shown on a PagePlan page, after its items.
func PlanItem(digest string) Item { return Item{CallID: "plan", Digest: digest} }

// CounterItem is the edited call of a counter-proposal on a PageCounter
// page: the new digest shown.
func CounterItem(digest string) Item { return Item{CallID: "counter", Digest: digest} }

// ScopeItem is the item of an allowance's scope on a PageAllowance page:
// the scope digest shown.
func ScopeItem(scopeDigest string) Item { return Item{CallID: "scope", Digest: scopeDigest} }

// AllowanceItem is the item of an allowance already given, on the page
// that confirms it: a token of the page that gives one (which has no such
// item) never confirms, nor the other way round.
func AllowanceItem(id string) Item { return Item{CallID: "allowance", Digest: id} }

// Item is one call a page showed and the digest it showed for it.
type Item struct {
	CallID, Digest string
}

// Shown is what a page presented to a person: the page kind, the viewer,
// when, and the calls with their digests.
type Shown struct {
	Page   string
	Viewer string
	At     time.Time
	Items  []Item
}

// Refusals of Check, for the decision to name.
var (
	// ErrMissing is a decision from a page that carried no token.
	ErrMissing = errors.New("present: the decision carries no presentation token")
	// ErrInvalid is a token that does not parse, or whose MAC does not
	// cover this viewer, page kind and these calls and digests.
	ErrInvalid = errors.New("present: the presentation token is not for this page, person, calls and digests")
	// ErrStale is a token rendered longer ago than the decision may be
	// (or later than now, beyond clock skew).
	ErrStale = errors.New("present: the page was rendered too long ago")
)

// skew is how far a rendering time may lie ahead of the verifier's clock:
// another replica rendered the page.
const skew = 5 * time.Second

// Key makes and checks presentation tokens. Its secret lives in the
// database, so that every replica accepts the tokens of the others.
type Key struct{ secret []byte }

// NewKey returns a Key over secret (at least 32 bytes).
func NewKey(secret []byte) (*Key, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("present: a key needs at least 32 bytes, got %d", len(secret))
	}
	return &Key{secret: slices.Clone(secret)}, nil
}

// Token is the token of what s shows, its time kept to the millisecond.
func (k *Key) Token(s Shown) string {
	ms := s.At.UnixMilli()
	return "p1." + s.Page + "." + strconv.FormatInt(ms, 10) + "." +
		base64.RawURLEncoding.EncodeToString(k.mac(s.Page, s.Viewer, ms, s.Items))
}

// Check verifies that token was made for page kind page, shown to viewer,
// with exactly items (in any order), rendered no longer than maxAge before
// now. It returns what was presented.
func (k *Key) Check(token, page, viewer string, items []Item, now time.Time, maxAge time.Duration) (Shown, error) {
	if token == "" {
		return Shown{}, ErrMissing
	}
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != "p1" || parts[1] != page {
		return Shown{}, ErrInvalid
	}
	ms, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil || ms < 0 {
		return Shown{}, ErrInvalid
	}
	mac, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || !hmac.Equal(mac, k.mac(page, viewer, ms, items)) {
		return Shown{}, ErrInvalid
	}
	at := time.UnixMilli(ms).UTC()
	if at.After(now.Add(skew)) || now.Sub(at) > maxAge {
		return Shown{}, fmt.Errorf("%w (rendered %s)", ErrStale, at.Format(time.RFC3339))
	}
	return Shown{Page: page, Viewer: viewer, At: at, Items: sorted(items)}, nil
}

// mac is the HMAC of one presentation. Every field is written with its
// length first, so that no two presentations share the bytes hashed.
func (k *Key) mac(page, viewer string, ms int64, items []Item) []byte {
	// The fields are gathered and hashed with one Write: each Write of a
	// field would copy it to the heap (the hash is an interface).
	b := make([]byte, 0, 8*6+64+len(page)+len(viewer)+len(items)*(16+64))
	field := func(s string) {
		b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
		b = append(b, s...)
	}
	field("countersign/v1/presented")
	field(page)
	field(viewer)
	var n [20]byte
	field(string(strconv.AppendInt(n[:0], ms, 10)))
	for _, it := range sorted(items) {
		field(it.CallID)
		field(it.Digest)
	}
	m := hmac.New(sha256.New, k.secret)
	m.Write(b)
	return m.Sum(nil)
}

// sorted is items in call id order, so that a batch's token does not
// depend on the order its form lists the calls in.
func sorted(items []Item) []Item {
	out := slices.Clone(items)
	slices.SortFunc(out, func(a, b Item) int {
		if c := strings.Compare(a.CallID, b.CallID); c != 0 {
			return c
		}
		return strings.Compare(a.Digest, b.Digest)
	})
	return out
}
