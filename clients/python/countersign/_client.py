"""The HTTP client of Countersign's agent API (v1), standard library only."""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable, Mapping, Optional, Union

from ._canonical import NumberPaths, digest_of, envelope, without
from ._errors import ConsoleUnreachable, CountersignError, DigestMismatch, Problem, WaitTimeout

DEFAULT_POLL_WAIT = 60.0
DEFAULT_REQUEST_TIMEOUT = 30.0
DEFAULT_MAX_OUTAGE = 120.0
MAX_RESPONSE_BYTES = 8 << 20
USER_AGENT = "countersign-python-client/1"

STATUS_PENDING = "pending"
STATUS_APPROVED = "approved"
STATUS_DENIED = "denied"
STATUS_EXPIRED = "expired"
STATUS_CANCELLED = "cancelled"
STATUS_REDEEMED = "redeemed"
#: An approved call whose grant an operator revoked before it was redeemed
#: (see ``Call.revocation``): redeeming it is refused (revoked).
STATUS_REVOKED = "revoked"
#: A call an operator answered with an edited one, its counter-proposal
#: (see ``Call.countered_by``): accept the counter or cancel it to decline.
STATUS_COUNTERED = "countered"

#: What became of an approved call's grant (``Call.grant_state``): live (it
#: can still be redeemed), expired (it ran out unredeemed; the status stays
#: approved, but the call runs only if proposed again), revoked, redeemed.
GRANT_LIVE = "live"
GRANT_EXPIRED = "expired"
GRANT_REVOKED = "revoked"
GRANT_REDEEMED = "redeemed"

OUTCOME_SUCCEEDED = "succeeded"
OUTCOME_FAILED = "failed"
OUTCOME_UNKNOWN = "unknown"
OUTCOME_LEASE_EXPIRED = "lease_expired"

VERDICT_EXECUTED = "executed"
VERDICT_NOT_EXECUTED = "not_executed"


def _time(s: Optional[str]) -> Optional[datetime]:
    """Read an RFC 3339 time as the console writes it (UTC, up to
    nanoseconds), on every Python from 3.10."""
    if not s:
        return None
    s = s.replace("Z", "+00:00").replace("z", "+00:00")
    if "." in s:
        head, _, rest = s.partition(".")
        i = 0
        while i < len(rest) and rest[i].isdigit():
            i += 1
        s = head + "." + (rest[:i] + "000000")[:6] + rest[i:]
    t = datetime.fromisoformat(s)
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


METHOD_CLICK = "click"
METHOD_PASSKEY = "passkey"
METHOD_BATCH = "batch"
METHOD_COMMAND = "command"
METHOD_POLICY = "policy"
METHOD_ALLOWANCE = "allowance"

#: Whether a person saw the call before approving it (``Approval.human``).
HUMAN_TRUE = "true"
HUMAN_FALSE = "false"
HUMAN_UNATTESTED = "unattested"


@dataclass(frozen=True)
class Presented:
    """The page that presented a call to its approver: ``page`` is call,
    batch or allowance (the page that gave or confirmed an allowance), ``at``
    when it was rendered."""

    page: str
    at: Optional[datetime]


@dataclass(frozen=True)
class Approval:
    """One approval of a call: who gave it (the operator as people see
    them: a local account's name, a single-sign-on operator's provider user
    name, else display name, else ``(single sign-on user)``, never an
    ``oidc:HOST/SUB`` principal; or ``policy:`` and the rule's id), through
    which channel (web, cli, policy, allowance), and how:
    ``method`` is click (on the call's page), passkey (signed with the
    operator's passkey), batch (on a batch review page), command
    (``console approve``), policy (a rule of the tools file) or allowance
    (a standing approval an operator gave; ``via`` names it, as it names a
    batch). ``human`` says whether a person saw the call: "true" when the
    page that presented it (``presented``) was checked, "false" for a rule
    or an allowance, "unattested" for a command. ``digest`` is the digest
    approved: always the call's. ``for_`` (``for`` on the wire) names the
    person on whose behalf ``by`` approved through a delegation, "" for
    none."""

    by: str
    channel: str
    method: str
    at: Optional[datetime]
    human: str = ""
    digest: str = ""
    via: str = ""
    presented: Optional[Presented] = None
    for_: str = ""

    @classmethod
    def from_json(cls, g: dict) -> "Approval":
        p = g.get("presented")
        return cls(g.get("by", ""), g.get("channel", ""), g.get("method", ""), _time(g.get("at")),
                   human=g.get("human", ""), digest=g.get("digest", ""), via=g.get("via", ""),
                   presented=Presented(p.get("page", ""), _time(p.get("at"))) if isinstance(p, dict) else None,
                   for_=g.get("for", ""))


@dataclass(frozen=True)
class Approvals:
    required: int
    received: int
    #: Each approval, in the order given.
    given: tuple = ()


@dataclass(frozen=True)
class Decision:
    """An operator's denial: who (named as in ``Approval.by``, or
    ``policy:RULE``), why and when."""

    by: str
    reason: str
    at: Optional[datetime]


@dataclass(frozen=True)
class Revocation:
    """An operator's revocation of an approved call's grant before it was
    redeemed: who (named as in ``Approval.by``), why and when. The grant is
    refused at redemption (revoked) from then on; hand the reason to the
    model as a denial's."""

    by: str
    reason: str
    at: Optional[datetime]


@dataclass(frozen=True)
class Comment:
    """An operator's note with an approval; ``by`` is named as in
    ``Approval.by``."""

    by: str
    comment: str
    at: Optional[datetime]


@dataclass(frozen=True)
class Outcome:
    """What the executor reported (succeeded, failed, unknown), or
    lease_expired when nobody reported before the lease ended."""

    status: str
    detail: str = ""
    at: Optional[datetime] = None


@dataclass(frozen=True)
class Resolution:
    """A person's finding about a call whose outcome was unknown or whose
    lease expired: ``verdict`` is executed or not_executed; ``by`` is named
    as in ``Approval.by``."""

    verdict: str
    by: str
    note: str
    at: Optional[datetime]
    evidence: str = ""


@dataclass(frozen=True)
class Step:
    """One step of a call's lineage: who, when and the digest it concerned;
    ``token`` for the proposal and the redemption (the API token's id), the
    ``verdict``, ``method``, ``human`` and ``via`` of a decision, the
    ``page`` of a presentation; ``for_`` (``for`` on the wire) the
    delegator of a decision given through a delegation."""

    by: str
    at: Optional[datetime]
    digest: str = ""
    token: str = ""
    verdict: str = ""
    method: str = ""
    human: str = ""
    via: str = ""
    page: str = ""
    for_: str = ""

    @classmethod
    def from_json(cls, d: dict) -> "Step":
        return cls(d.get("by", ""), _time(d.get("at")), digest=d.get("digest", ""), token=d.get("token", ""),
                   verdict=d.get("verdict", ""), method=d.get("method", ""), human=d.get("human", ""),
                   via=d.get("via", ""), page=d.get("page", ""), for_=d.get("for", ""))


@dataclass(frozen=True)
class Lineage:
    """A call from proposal to outcome: every approval's digest and the
    redeemed digest are the proposed one."""

    proposed: Step
    presented: tuple = ()
    decided: tuple = ()
    redeemed: Optional[Step] = None
    outcome: Optional[Outcome] = None
    resolution: Optional[Resolution] = None


@dataclass(frozen=True)
class Lease:
    """A heartbeat's answer: the executor's lease now ends at
    ``lease_until``; one heartbeat extends it by at most ``extend_max``
    seconds (the tool's outcome_within)."""

    call_id: str
    lease_until: Optional[datetime]
    extend_max: int


@dataclass
class Call:
    """The API's call object. ``args`` are the arguments as the console
    stored them (integers exact); ``raw`` is the decoded response body."""

    id: str
    status: str
    actor: str
    audience: str
    tool: str
    target: str
    args: dict
    digest: str
    created_at: Optional[datetime]
    decide_by: Optional[datetime]
    approvals: Approvals
    rationale: str = ""
    #: The people who run the agent, from its token when the call was made,
    #: each once, named as people see them (account names, a single-sign-on
    #: account by its provider user name and never an oidc:HOST/SUB
    #: principal, team:GROUP): none of them may approve the call.
    owners: tuple = ()
    grant: str = ""
    grant_expires_at: Optional[datetime] = None
    #: Once the call was approved, what became of its grant when the console
    #: answered (GRANT_LIVE, GRANT_EXPIRED, GRANT_REVOKED, GRANT_REDEEMED);
    #: "" for a call never approved.
    grant_state: str = ""
    decision: Optional[Decision] = None
    #: Set when an operator revoked the grant before it was redeemed
    #: (status revoked).
    revocation: Optional[Revocation] = None
    outcome: Optional[Outcome] = None
    #: The notes operators left with their approvals, in order.
    comments: tuple = ()
    #: When the grant was redeemed, and when the executor's lease ends (or
    #: ended): report the outcome, or send heartbeats, before then.
    redeemed_at: Optional[datetime] = None
    lease_until: Optional[datetime] = None
    #: Set once a person resolved an unknown or expired outcome.
    resolution: Optional[Resolution] = None
    #: The call from proposal to outcome.
    lineage: Optional[Lineage] = None
    #: Set on a countered call: the counter-proposal, a dict with its id,
    #: envelope (the edited call) and digest. Accept it with accept(id).
    countered_by: Optional[dict] = None
    #: On a counter-proposal: the id of the call it answers.
    countered_from: str = ""
    #: On a counter-proposal: when its agent accepted it.
    accepted_at: Optional[datetime] = None
    #: On an item of a plan: a dict with the plan's id, the item's index
    #: and the plan's state (and valid_until once approved).
    plan: Optional[dict] = None
    #: Set by submit: True when the console stored a new call (201), False
    #: when it returned the same actor's identical pending or approved call.
    created: bool = False
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def decided(self) -> bool:
        """Any status but pending."""
        return self.status != STATUS_PENDING

    def spec(self) -> dict:
        """The call as it must be presented at redemption: its tool, target
        and args exactly as the console returned them."""
        return {"tool": self.tool, "target": self.target, "args": self.args}

    def envelope(self, args: Optional[Mapping[str, Any]] = None) -> dict:
        """The envelope of this call (with other args when given)."""
        return envelope(self.actor, self.audience, self.tool, self.target, self.args if args is None else args)

    @classmethod
    def from_json(cls, d: Any) -> "Call":
        if not isinstance(d, dict) or not isinstance(d.get("id"), str) or not d["id"]:
            raise ValueError("not a call")
        ap = d.get("approvals") or {}
        dec = d.get("decision")
        rev = d.get("revocation")
        out = d.get("outcome")
        res = d.get("resolution")
        return cls(
            id=d["id"], status=d.get("status", ""), actor=d.get("actor", ""), audience=d.get("audience", ""),
            tool=d.get("tool", ""), target=d.get("target", ""), args=d.get("args") or {},
            digest=d.get("digest", ""), created_at=_time(d.get("created_at")), decide_by=_time(d.get("decide_by")),
            approvals=Approvals(int(ap.get("required", 0)), int(ap.get("received", 0)),
                                tuple(Approval.from_json(g) for g in (ap.get("given") or []) if isinstance(g, dict))),
            owners=tuple(o for o in (d.get("owners") or []) if isinstance(o, str)),
            rationale=d.get("rationale", ""), grant=d.get("grant", ""),
            grant_expires_at=_time(d.get("grant_expires_at")), grant_state=d.get("grant_state", ""),
            decision=Decision(dec.get("by", ""), dec.get("reason", ""), _time(dec.get("at"))) if dec else None,
            revocation=Revocation(rev.get("by", ""), rev.get("reason", ""), _time(rev.get("at")))
            if isinstance(rev, dict) else None,
            outcome=_outcome(out),
            redeemed_at=_time(d.get("redeemed_at")), lease_until=_time(d.get("lease_until")),
            resolution=_resolution(res),
            lineage=_lineage(d.get("lineage")),
            countered_by=d.get("countered_by") if isinstance(d.get("countered_by"), dict) else None,
            countered_from=d.get("countered_from", "") if isinstance(d.get("countered_from"), str) else "",
            accepted_at=_time(d.get("accepted_at")),
            plan=d.get("plan") if isinstance(d.get("plan"), dict) else None,
            comments=tuple(Comment(c.get("by", ""), c.get("comment", ""), _time(c.get("at")))
                           for c in (d.get("comments") or []) if isinstance(c, dict)),
            raw=d,
        )


def _outcome(out: Any) -> Optional[Outcome]:
    if not isinstance(out, dict):
        return None
    return Outcome(out.get("status", ""), out.get("detail", ""), _time(out.get("at")))


def _resolution(res: Any) -> Optional[Resolution]:
    if not isinstance(res, dict):
        return None
    return Resolution(res.get("verdict", ""), res.get("by", ""), res.get("note", ""), _time(res.get("at")),
                      res.get("evidence", ""))


def _lineage(d: Any) -> Optional[Lineage]:
    if not isinstance(d, dict) or not isinstance(d.get("proposed"), dict):
        return None

    def steps(name: str) -> tuple:
        return tuple(Step.from_json(s) for s in (d.get(name) or []) if isinstance(s, dict))

    red = d.get("redeemed")
    return Lineage(Step.from_json(d["proposed"]), presented=steps("presented"), decided=steps("decided"),
                   redeemed=Step.from_json(red) if isinstance(red, dict) else None,
                   outcome=_outcome(d.get("outcome")), resolution=_resolution(d.get("resolution")))


@dataclass(frozen=True)
class Check:
    """One step of a redemption; ``ok`` is None when it was not reached."""

    name: str
    ok: Optional[bool]


@dataclass
class Redemption:
    """The console's answer to a grant presented with a call. A rejection is
    an answer, not an exception: ``accepted`` is False and ``reason`` says
    which check failed."""

    decision: str
    accepted: bool
    call_id: str
    reason: str
    message: str
    checks: list[Check]
    status_code: int
    #: Accepted only: the canonical envelope that was hashed, exactly (run
    #: the call from these bytes, or check them), its digest, when the
    #: executor's lease ends, and how long one heartbeat extends it
    #: (seconds).
    envelope: str = ""
    digest: str = ""
    lease_until: Optional[datetime] = None
    outcome_within: int = 0
    raw: dict = field(default_factory=dict, repr=False)

    def failed(self) -> Optional[Check]:
        """The first check that failed, or None."""
        return next((c for c in self.checks if c.ok is False), None)


CallLike = Union[Call, Mapping[str, Any]]


class _Stopped(Exception):
    """A wait that was told to stop (its caller no longer waits)."""


class _Transient(Exception):
    """A console that is restarting or unreachable: a read may be retried."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


class Client:
    """Talks to one Countersign console with one agent token.

    >>> c = Client("http://127.0.0.1:8080", token)
    >>> call = c.submit("payments.refund", "invoice:INV-1042",
    ...                 {"amount_minor": 1299, "currency": "USD", "reason_code": "duplicate"})
    >>> call = c.wait(call.id)
    >>> if call.status == "approved" and c.redeem(call.grant, call).accepted:
    ...     ...  # run the tool, then
    ...     c.report_outcome(call.id, "succeeded", "refund re-1042 issued")

    Numbers must be integers within ±(2^53−1): the console refuses floats
    (money is an integer in minor units) except where an MCP-mirrored tool
    declares a number.
    """

    def __init__(self, url: str, token: str, *, poll_wait: float = DEFAULT_POLL_WAIT,
                 request_timeout: float = DEFAULT_REQUEST_TIMEOUT, max_outage: float = DEFAULT_MAX_OUTAGE,
                 backoff: tuple[float, float] = (0.2, 5.0)):
        self.url = url.rstrip("/")
        self.token = token
        self.poll_wait = poll_wait
        self.request_timeout = request_timeout
        self.max_outage = max_outage
        self.backoff = backoff

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Client":
        """A client for COUNTERSIGN_URL (default http://127.0.0.1:8080) with
        the token in COUNTERSIGN_TOKEN."""
        token = os.environ.get("COUNTERSIGN_TOKEN", "")
        if not token:
            raise CountersignError("unauthorized", "COUNTERSIGN_TOKEN is not set: create a token with "
                                   "`console token create --actor ... --audience ...` and export it")
        return cls(os.environ.get("COUNTERSIGN_URL") or "http://127.0.0.1:8080", token, **kwargs)

    # The agent API.

    def submit(self, tool: str, target: str, args: Optional[Mapping[str, Any]] = None,
               rationale: Optional[str] = None) -> Call:
        """Propose a call. Returns the stored call: a new one (``created``
        True) or the same actor's identical call that is still pending or
        approved. A refused proposal raises CountersignError listing every
        problem (code invalid_arguments, unknown_tool, retry_limit, ...)."""
        proposal: dict[str, Any] = {"tool": tool, "target": target, "args": {} if args is None else args}
        if rationale:
            proposal["rationale"] = rationale
        return self.submit_json(_encode(proposal))

    def submit_json(self, body: Union[bytes, str]) -> Call:
        """Propose a call whose JSON text the caller wrote; sent as it is."""
        if isinstance(body, str):
            body = body.encode("utf-8")
        status, data = self._do("POST", "/api/v1/calls", body)
        call = _call(status, data, (200, 201))
        call.created = status == 201
        return call

    def get(self, call_id: str) -> Call:
        """One of this agent's calls (another actor's call is a 404)."""
        status, data = self._do("GET", _call_path(call_id))
        return _call(status, data, (200,))

    def wait(self, call_id: str, timeout: Optional[float] = None) -> Call:
        """Long-poll until the call is no longer pending and return it:
        approved with its grant, denied with the operator's reason, expired,
        cancelled or redeemed. While the console restarts (connection
        refused or reset, 502, 503, 504) it retries with backoff for up to
        max_outage seconds. With a timeout (seconds) that passes first it
        raises WaitTimeout carrying the last state seen."""
        return self._wait(call_id, timeout, None)

    def _wait(self, call_id: str, timeout: Optional[float], stop: Optional[threading.Event]) -> Call:
        """wait, ending with _Stopped after the poll under way once ``stop``
        is set (AsyncClient.wait's cancellation)."""
        sleep = time.sleep if stop is None else stop.wait
        deadline = None if timeout is None else time.monotonic() + timeout
        last: Optional[Call] = None
        outage_start: Optional[float] = None
        delay = self.backoff[0]
        # A poll that answers early with the call still pending (one
        # approval of several, a console draining) is followed by a pause.
        min_interval = min(self.poll_wait, 0.5)
        while True:
            if stop is not None and stop.is_set():
                raise _Stopped(call_id)
            wait = self.poll_wait
            if deadline is not None:
                wait = max(min(wait, deadline - time.monotonic() - 0.25), 0.0)
            start = time.monotonic()
            try:
                call = self._poll(call_id, wait)
            except _Transient as t:
                if outage_start is None:
                    outage_start = start
                if self.max_outage > 0 and time.monotonic() - outage_start >= self.max_outage:
                    raise t.error from None
                pause = delay / 2 + random.uniform(0, delay / 2)
                if deadline is not None and time.monotonic() + pause >= deadline:
                    if last is None:
                        raise t.error from None
                    raise WaitTimeout(last) from None
                sleep(pause)
                delay = min(2 * delay, self.backoff[1])
                continue
            last, outage_start, delay = call, None, self.backoff[0]
            if call.decided:
                return call
            if deadline is not None and time.monotonic() >= deadline - 0.25:
                raise WaitTimeout(call)
            pause = min_interval - (time.monotonic() - start)
            if pause > 0:
                sleep(pause)

    def _poll(self, call_id: str, wait: float) -> Call:
        path = _call_path(call_id) + "?wait=" + f"{int(wait * 1000)}ms"
        try:
            status, data = self._do("GET", path, timeout=wait + self.request_timeout)
        except ConsoleUnreachable as e:
            raise _Transient(e) from e
        if status in (502, 503, 504):
            raise _Transient(CountersignError.from_response(status, data))
        return _call(status, data, (200,))

    def redeem(self, grant: str, call: CallLike) -> Redemption:
        """Present the grant with the call it was issued for, right before
        executing it: exactly the approved call (the Call that wait
        returned, or a dict with tool, target and args). A rejection (403,
        or 409 for a grant already redeemed) is returned, not raised. A
        redemption refused because an operator froze the call's tool or actor
        raises CountersignError with code ``frozen`` (status 503, ``reason``
        the freeze's): nothing was consumed, and the grant may be redeemed
        once the freeze is lifted, while it lives."""
        spec = call.spec() if isinstance(call, Call) else {"tool": call["tool"], "target": call["target"],
                                                          "args": call.get("args") or {}}
        status, data = self._do("POST", "/api/v1/redeem", _encode({"grant": grant, "call": spec}))
        if status in (200, 403, 409):
            try:
                d = json.loads(data)
            except ValueError:
                d = None
            if isinstance(d, dict) and d.get("decision") in ("accepted", "rejected"):
                return Redemption(
                    decision=d["decision"], accepted=d["decision"] == "accepted" and status == 200,
                    call_id=d.get("call_id", ""), reason=d.get("reason", ""), message=d.get("message", ""),
                    checks=[Check(c.get("name", ""), c.get("ok")) for c in d.get("checks") or []],
                    status_code=status, envelope=d.get("envelope", ""), digest=d.get("digest", ""),
                    lease_until=_time(d.get("lease_until")), outcome_within=int(d.get("outcome_within") or 0), raw=d)
        if status == 503:
            frozen = _frozen(data)
            if frozen:
                raise frozen
        raise CountersignError.from_response(status, data)

    def report_outcome(self, call_id: str, status: str, detail: Optional[str] = None) -> Call:
        """Report what happened when the redeemed call ran: succeeded,
        failed or unknown, with optional text for the audit trail. Once per
        call, after redemption (409 otherwise)."""
        body: dict[str, Any] = {"status": status}
        if detail:
            body["detail"] = detail
        st, data = self._do("POST", _call_path(call_id) + "/outcome", _encode(body))
        return _call(st, data, (200,))

    def heartbeat(self, call_id: str, extend: Optional[float] = None) -> Lease:
        """Extend the executor's lease of a redeemed call while it runs:
        to ``extend`` seconds from now (whole seconds, at most the tool's
        outcome_within; default outcome_within). A lease never shortens.
        Only the token that redeemed the call may send it; CountersignError
        otherwise (409 not_lease_holder, not_redeemed,
        outcome_already_reported, or lease_expired when the lease had
        already ended: the outcome is still accepted, report it)."""
        body = None
        if extend is not None:
            if extend < 1 or extend != int(extend):
                raise CountersignError("out_of_range", f"extend must be a whole number of seconds, at least 1 (got {extend})",
                                       [Problem("out_of_range", "/extend_seconds", "extend_seconds must be at least 1")])
            body = _encode({"extend_seconds": int(extend)})
        status, data = self._do("POST", _call_path(call_id) + "/heartbeat", body)
        if status != 200:
            raise CountersignError.from_response(status, data)
        try:
            d = json.loads(data)
            return Lease(d["call_id"], _time(d.get("lease_until")), int(d.get("extend_max") or 0))
        except (ValueError, KeyError, TypeError):
            raise CountersignError("unexpected_response", "the heartbeat's answer is not a lease: "
                                   + data.decode("utf-8", "replace")[:200], status=status, raw=data) from None

    def accept(self, call_id: str) -> Call:
        """Accept a counter-proposal (a countered call's ``countered_by``):
        the counter, approved with its grant once its approvals are
        complete; else wait for it. Decline a counter with cancel."""
        status, data = self._do("POST", _call_path(call_id) + "/accept")
        return _call(status, data, (200,))

    def cancel(self, call_id: str) -> Call:
        """Withdraw a pending call (409 not_pending otherwise)."""
        status, data = self._do("DELETE", _call_path(call_id))
        return _call(status, data, (200,))

    # Plans (docs/plans.md): several calls a person approves once.

    def submit_plan(self, items: Iterable[Mapping[str, Any]], rationale: str, *, ordered: bool = False) -> "Plan":
        """Propose a plan: items are dicts with tool, target and args. A
        refused plan raises CountersignError listing every problem of every
        item, with paths into the plan (``/items/3/args/amount_minor``)."""
        body = {"items": [{"tool": i["tool"], "target": i["target"], "args": i.get("args") or {}} for i in items],
                "rationale": rationale, "ordered": ordered}
        status, data = self._do("POST", "/api/v1/plans", _encode(body))
        return _plan(status, data, (201,))

    def get_plan(self, plan_id: str) -> "Plan":
        """One of this token's plans, with every item."""
        status, data = self._do("GET", _plan_path(plan_id))
        return _plan(status, data, (200,))

    def cancel_plan(self, plan_id: str) -> "Plan":
        """Withdraw a pending or approved plan: the grants of its minted,
        unredeemed items are revoked and its unminted items cancelled."""
        status, data = self._do("POST", _plan_path(plan_id) + "/cancel")
        return _plan(status, data, (200,))

    def mint_item(self, plan_id: str, n: int) -> Call:
        """Mint the grant of item n (from 0) of an approved plan: the item,
        approved with its grant, to redeem like any call."""
        status, data = self._do("POST", _plan_path(plan_id) + f"/items/{int(n)}/grant")
        return _call(status, data, (200,))

    def wait_plan(self, plan_id: str, timeout: Optional[float] = None, interval: float = 1.0) -> "Plan":
        """Long-poll the plan until it is no longer pending and return it;
        ``interval`` is the least time between two reads, for a read
        answered early with the plan still pending. With a timeout that
        passes first, raise CountersignError ``wait_timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self.poll_wait
            if deadline is not None:
                wait = max(min(wait, deadline - time.monotonic() - 0.25), 0.0)
            start = time.monotonic()
            status, data = self._do("GET", _plan_path(plan_id) + "?wait=" + f"{int(wait * 1000)}ms",
                                    timeout=wait + self.request_timeout)
            p = _plan(status, data, (200,))
            if p.status != STATUS_PENDING:
                return p
            pause = interval - (time.monotonic() - start)
            if deadline is not None and time.monotonic() + max(pause, 0) > deadline - 0.25:
                raise CountersignError("wait_timeout", f"plan {plan_id} is still pending")
            if pause > 0:
                time.sleep(pause)

    def plan(self, items: Iterable[Mapping[str, Any]], rationale: str, run, *, ordered: bool = False,
             timeout: Optional[float] = None, interval: float = 1.0) -> "Plan":
        """Submit a plan, wait for a person's decision, then for each item
        in order mint its grant, redeem it, call ``run(item)`` and report
        the outcome: ``run`` returns None or "succeeded", "failed" or
        "unknown" (or a (status, detail) pair); an exception is reported as
        unknown and raised again. It stops at the first item that does not
        succeed (the console halts the plan) and raises CountersignError
        ``plan_halted`` (its ``plan`` attribute is the plan then); a plan denied or expired raises
        ``plan_not_pending``. Returns the plan after its last item."""
        p = self.submit_plan(items, rationale, ordered=ordered)
        p = self.wait_plan(p.id, timeout, interval)
        if p.status != "approved":
            raise CountersignError("plan_not_pending", f"the plan is {p.status}: {p.reason}")
        for n in range(len(p.items)):
            item = self.mint_item(p.id, n)
            r = self.redeem(item.grant, item)
            if not r.accepted:
                raise CountersignError(r.reason or "rejected", f"item {n} of plan {p.id}: redemption rejected: {r.message}")
            try:
                result = run(item)
            except BaseException as e:
                self.report_outcome(item.id, "unknown", str(e)[:1000])
                raise
            status, detail = (result, None) if not isinstance(result, tuple) else result
            status = status or "succeeded"
            self.report_outcome(item.id, status, detail)
            if status != "succeeded":
                err = CountersignError("plan_halted", f"item {n} of plan {p.id} reported {status}; the plan stops here")
                err.plan = self.get_plan(p.id)  # type: ignore[attr-defined]
                raise err
        return self.get_plan(p.id)

    def keys(self) -> dict:
        """The console's JSON Web Key Set: the Ed25519 keys that may still
        verify a live grant."""
        status, data = self._do("GET", "/api/v1/keys", auth=False)
        if status != 200:
            raise CountersignError.from_response(status, data)
        return json.loads(data)

    def verify_digest(self, call: Call, *, args: Optional[Mapping[str, Any]] = None,
                      informational: Iterable[str] = (), number_paths: NumberPaths = None) -> str:
        """Recompute the digest of the call as asked for and check it against
        the console's. ``args`` are the arguments as proposed (default: the
        call's own); ``informational`` lists the tool's unbound members
        (JSON Pointers into args, such as ``/notes``), which the digest
        leaves out. Returns the digest; raises DigestMismatch otherwise."""
        bound = without(call.args if args is None else args, informational)
        local = digest_of(call.envelope(bound), number_paths=number_paths)
        if local != call.digest:
            raise DigestMismatch(call.id, call.digest, local)
        return local

    def gated(self, tool: str, **kwargs: Any):
        """The gated decorator bound to this client; see countersign.gated."""
        from ._gated import gated

        return gated(tool, client=self, **kwargs)

    # Transport.

    def _do(self, method: str, path: str, body: Optional[bytes] = None, *, timeout: Optional[float] = None,
            auth: bool = True) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, data=body, method=method)
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", USER_AGENT)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        if auth:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.request_timeout) as res:
                return res.status, res.read(MAX_RESPONSE_BYTES)
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read(MAX_RESPONSE_BYTES)
        except urllib.error.URLError as e:
            raise ConsoleUnreachable(self.url, method, path, e.reason) from e
        except (OSError, http.client.HTTPException) as e:  # reset, timed out, cut short
            raise ConsoleUnreachable(self.url, method, path, e) from e


@dataclass
class Plan:
    """The API's plan object: a list of calls approved once, each item a
    Call with its own digest, status and (once minted) grant."""

    id: str
    status: str
    digest: str
    ordered: bool
    rationale: str
    items: tuple
    decide_by: Optional[datetime] = None
    valid_until: Optional[datetime] = None
    reason: str = ""
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d: Any) -> "Plan":
        if not isinstance(d, dict) or not isinstance(d.get("id"), str) or not d["id"]:
            raise ValueError("not a plan")
        return cls(id=d["id"], status=d.get("status", ""), digest=d.get("digest", ""), ordered=bool(d.get("ordered")),
                   rationale=d.get("rationale", ""), items=tuple(Call.from_json(i) for i in d.get("items") or []),
                   decide_by=_time(d.get("decide_by")), valid_until=_time(d.get("valid_until")),
                   reason=d.get("reason", ""), raw=d)


def _plan_path(plan_id: str) -> str:
    return "/api/v1/plans/" + urllib.parse.quote(plan_id, safe="")


def _plan(status: int, data: bytes, ok: tuple[int, ...]) -> Plan:
    if status not in ok:
        raise CountersignError.from_response(status, data)
    try:
        return Plan.from_json(json.loads(data))
    except ValueError:
        text = data.decode("utf-8", "replace")[:200]
        raise CountersignError("unexpected_response", f"the response is not a plan: {text}", status=status,
                               raw=data) from None


def _call_path(call_id: str) -> str:
    return "/api/v1/calls/" + urllib.parse.quote(call_id, safe="")


def _call(status: int, data: bytes, ok: tuple[int, ...]) -> Call:
    if status not in ok:
        raise CountersignError.from_response(status, data)
    try:
        return Call.from_json(json.loads(data))
    except ValueError:
        text = data.decode("utf-8", "replace")[:200]
        raise CountersignError("unexpected_response", f"the response is not a call: {text}", status=status,
                               raw=data) from None


def _frozen(data: bytes) -> Optional[CountersignError]:
    """The error of a redemption refused because an operator froze the
    call's tool or actor: a 503 in the redemption's own shape (reason
    ``frozen``, the freeze's reason in ``freeze``), or None for another
    answer. An operational failure, not a refusal of the call."""
    try:
        d = json.loads(data)
    except ValueError:
        return None
    if not isinstance(d, dict) or d.get("decision") != "rejected" or d.get("reason") != "frozen":
        return None
    freeze = d.get("freeze") if isinstance(d.get("freeze"), dict) else {}
    return CountersignError("frozen", str(d.get("message") or "an operator froze this call's tool or actor"),
                            status=503, reason=freeze.get("reason") or None, call_id=d.get("call_id") or None,
                            raw=data)


def _encode(v: Any) -> bytes:
    """JSON text of a request body. Non-ASCII is escaped, so a string that
    is not valid Unicode (a lone surrogate) reaches the console, which names
    it with invalid_utf8 and its path, instead of failing here."""
    try:
        return json.dumps(v, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    except ValueError as e:
        raise CountersignError("malformed_json", f"the request is not JSON: {e} (NaN and infinities have no JSON form)") from e
    except TypeError as e:
        raise CountersignError("wrong_type", f"the request is not JSON: {e} (use dict, list, str, int, bool or None)",
                               [Problem("wrong_type", "", str(e))]) from e
