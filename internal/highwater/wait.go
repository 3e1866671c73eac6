package highwater

import "github.com/countersign/countersign/internal/audit"

// Which commits advance the mark before they are acknowledged.
//
// The mark exists so that a database restored from an older copy cannot
// undo a change whose loss would let something happen again: a grant
// redeemed twice, a revoked grant, token or account, a frozen tool or a
// denied call working again, an allowance used more often than it was
// given. A commit that holds such a change advances the mark (one sync)
// before it is acknowledged. A commit that holds only changes whose loss
// takes something away and gives nothing back may leave the mark where it
// is; the next commit that advances it covers it too:
//
//   - submitted: a call the restored copy lacks is unknown to it; its agent
//     can wait for it and redeem nothing.
//   - approved (by a person or a rule): a lost approval leaves the call
//     pending; it must be approved again.
//   - granted: redemption accepts only the grant whose id the call records,
//     so a grant the restored copy lacks redeems nothing.
//   - outcome `succeeded`: what an executor reported of a redeemed call;
//     the copy that lacks it still holds the redemption (its commit
//     advanced the mark), so the grant stays used up, and the call waits
//     for its outcome until its lease lapses and a person resolves it (an
//     ordered plan's next item waits too). Any other outcome advances the
//     mark: a `failed` or `unknown` item halts its plan, and a copy that
//     forgot it would let the plan's other items be minted.
//
// Every other kind of entry, including kinds added later, advances the
// mark: the list of those that may wait is closed. A write that uses
// something up without an entry of its own kind (an allowance's use, a
// passkey's counter, a redemption's nonce) or records a bound (a retry
// block, a freeze, a revocation, an allowance's change) advances it too,
// whatever its entries: the stores mark the commits that hold one.
var mayWait = map[string]bool{
	audit.KindSubmitted: true,
	audit.KindApproved:  true,
	audit.KindGranted:   true,
	audit.KindOutcome:   true,
}

// MayWait reports whether audit entry e, alone, may be acknowledged
// before the mark covers it.
func MayWait(e *audit.Entry) bool {
	if e.Kind == audit.KindOutcome {
		d, _ := e.Details.(map[string]any)
		return d["status"] == "succeeded"
	}
	return mayWait[e.Kind]
}
