"""Countersign's Python client: propose a tool call, wait for an operator's
decision, redeem the grant right before executing, and report the outcome.

Standard library only; Python 3.10+.

    import countersign

    c = countersign.Client.from_env()           # COUNTERSIGN_URL, COUNTERSIGN_TOKEN
    call = c.submit("payments.refund", "invoice:INV-1042",
                    {"amount_minor": 1299, "currency": "USD", "reason_code": "duplicate"})
    call = c.wait(call.id)
    if call.status == "approved" and c.redeem(call.grant, call).accepted:
        ...                                     # run the tool
        c.report_outcome(call.id, "succeeded")

or, for a function that must only ever run approved (a def or an async
def; an async one never blocks the event loop):

    @countersign.gated("payments.refund", target="invoice:INV-1042")
    def refund(amount_minor, currency, reason_code): ...

AsyncClient has Client's methods as coroutines.

Errors are exceptions carrying the API's code, message and problems
(``e.to_dict()`` is the API's error shape, ready for a model when
``e.refusal``: a bad or revoked token, a 5xx or an unreachable console is
the application's to handle, not the model's).
``digest_of(envelope)`` recomputes a call's digest (RFC 8785 + SHA-256);
``scope_digest(scope)`` an allowance's scope digest.
"""

from ._async import AsyncClient
from ._canonical import (
    DIGEST_PREFIX,
    MAX_SAFE_INTEGER,
    SCOPE_DIGEST_PREFIX,
    canonical_bytes,
    canonical_envelope,
    digest_of,
    envelope,
    format_number,
    scope_digest,
    valid_tool_name,
    without,
)
from ._client import (
    Plan,
    GRANT_EXPIRED,
    GRANT_LIVE,
    GRANT_REDEEMED,
    GRANT_REVOKED,
    OUTCOME_FAILED,
    OUTCOME_LEASE_EXPIRED,
    OUTCOME_SUCCEEDED,
    OUTCOME_UNKNOWN,
    STATUS_APPROVED,
    STATUS_CANCELLED,
    STATUS_DENIED,
    STATUS_EXPIRED,
    STATUS_PENDING,
    STATUS_REDEEMED,
    STATUS_REVOKED,
    STATUS_COUNTERED,
    VERDICT_EXECUTED,
    VERDICT_NOT_EXECUTED,
    METHOD_ALLOWANCE,
    METHOD_BATCH,
    METHOD_CLICK,
    METHOD_COMMAND,
    METHOD_PASSKEY,
    METHOD_POLICY,
    HUMAN_FALSE,
    HUMAN_TRUE,
    HUMAN_UNATTESTED,
    Approval,
    Approvals,
    Call,
    Check,
    Client,
    Comment,
    Decision,
    Lease,
    Lineage,
    Outcome,
    Presented,
    Redemption,
    Resolution,
    Revocation,
    Step,
)
from ._errors import (
    ConsoleUnreachable,
    CountersignError,
    DigestError,
    DigestMismatch,
    NotApproved,
    Problem,
    RedemptionRejected,
    WaitTimeout,
)
from ._gated import gated

__version__ = "1.0.0"

__all__ = [
    "DIGEST_PREFIX", "MAX_SAFE_INTEGER", "canonical_bytes", "canonical_envelope", "digest_of", "envelope",
    "format_number", "valid_tool_name", "without", "SCOPE_DIGEST_PREFIX", "scope_digest",
    "OUTCOME_FAILED", "OUTCOME_LEASE_EXPIRED", "OUTCOME_SUCCEEDED", "OUTCOME_UNKNOWN", "STATUS_APPROVED",
    "STATUS_CANCELLED", "STATUS_DENIED", "STATUS_EXPIRED", "STATUS_PENDING", "STATUS_REDEEMED",
    "STATUS_REVOKED", "GRANT_EXPIRED", "GRANT_LIVE", "GRANT_REDEEMED", "GRANT_REVOKED",
    "STATUS_COUNTERED",
    "VERDICT_EXECUTED", "VERDICT_NOT_EXECUTED", "METHOD_CLICK", "METHOD_COMMAND", "METHOD_PASSKEY", "METHOD_POLICY",
    "METHOD_BATCH", "METHOD_ALLOWANCE", "HUMAN_TRUE", "HUMAN_FALSE", "HUMAN_UNATTESTED",
    "Approval", "Approvals", "AsyncClient", "Call", "Plan", "Check", "Client", "Comment", "Decision", "Lease", "Outcome",
    "Redemption", "Resolution", "Revocation", "Lineage", "Presented", "Step",
    "ConsoleUnreachable", "CountersignError", "DigestError", "DigestMismatch", "NotApproved", "Problem",
    "RedemptionRejected", "WaitTimeout", "gated",
]
