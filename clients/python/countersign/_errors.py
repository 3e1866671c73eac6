"""Exceptions of the Countersign client.

Every exception carries the API's error shape, so that it can be handed
back to the model that proposed the call: ``code``, ``message`` and
``problems`` (each with ``code``, ``path``, a JSON Pointer from the
proposal's root, and ``message``). ``to_dict()`` returns that shape.
Only an error whose ``refusal`` is true is the model's to act on; any other
(a bad or revoked token, a 5xx, the console unreachable) is the
application's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a proposal: a problem code, the JSON Pointer of
    the offending value from the proposal's root, and a sentence."""

    code: str
    path: str
    message: str

    def to_dict(self) -> dict:
        return {"code": self.code, "path": self.path, "message": self.message}


# The console's answers that refuse the call itself, whatever their status:
# a rule of the tools file, an operator's earlier denial, the block after
# three refusals in a row, a body too large. Beside them, a proposal whose
# content the console refused (its problems listed) is a refusal too.
_REFUSAL_CODES = frozenset({"denied_by_policy", "previously_denied", "retry_limit", "too_large", "previously_countered"})

# The reasons a rejected grant is the model's to act on (RedemptionRejected).
_REFUSED_GRANT_REASONS = frozenset({"tool_mismatch", "target_mismatch", "digest_mismatch", "expired",
                                    "revoked", "replayed", "tool_changed"})


class CountersignError(Exception):
    """An error answer of the console, or a refusal made by this client in
    its name. ``status`` is the HTTP status (None when nothing was sent)."""

    def __init__(self, code: str, message: str, problems: Optional[list[Problem]] = None, *,
                 status: Optional[int] = None, reason: Optional[str] = None, call_id: Optional[str] = None,
                 hint: Optional[str] = None, raw: Any = None, countered_by: Optional[str] = None):
        self.code = code
        self.message = message
        self.problems = list(problems or [])
        self.status = status
        self.reason = reason
        self.call_id = call_id
        self.hint = hint
        #: previously_countered: the counter-proposal to accept or decline.
        self.countered_by = countered_by
        self.raw = raw
        super().__init__(self._text())

    def _text(self) -> str:
        head = f"countersign: {self.status} {self.code}" if self.status else f"countersign: {self.code}"
        parts = [f"{head}: {self.message}"]
        for p in self.problems:
            parts.append(f"{p.code} at {p.path}: {p.message}" if p.path else f"{p.code}: {p.message}")
        return "; ".join(parts)

    @property
    def refusal(self) -> bool:
        """Whether the console refused this call: something the model that
        proposed it can act on (fix its arguments, stop, ask a person), such
        as a denial, a rule, an invalid proposal, or the block after repeated
        refusals. False for an operational failure the application must
        handle and the model cannot fix: the agent's own token missing,
        unknown or revoked (401) or not allowed the tool's host (403
        ``audience_not_allowed``), a tool the console does not know
        (``unknown_tool``: the application names the tool), any 5xx
        (``frozen``, ``unavailable``, ``internal``), an unreachable console,
        an answer not in the API's shape, a digest mismatch, a wait that
        timed out."""
        if self.status is None:
            return False
        if self.code in _REFUSAL_CODES:
            return True
        # A refused proposal lists its problems (malformed_json,
        # invalid_arguments, ...); unknown_tool lists one too, but names the
        # application's configuration, not the model's arguments.
        return (400 <= self.status < 500 and self.status not in (401, 403) and bool(self.problems)
                and self.code != "unknown_tool")

    def has_problem(self, code: str, path: Optional[str] = None) -> bool:
        """Whether a problem with code (at path, when given) is listed."""
        return any(p.code == code and (path is None or p.path == path) for p in self.problems)

    def to_dict(self) -> dict:
        """The API's error shape, for a model: {"error": {"code", "message", "problems", ...}}."""
        e: dict[str, Any] = {"code": self.code, "message": self.message,
                             "problems": [p.to_dict() for p in self.problems]}
        for k in ("reason", "call_id", "hint"):
            if getattr(self, k):
                e[k] = getattr(self, k)
        return {"error": e}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_response(cls, status: int, body: bytes) -> "CountersignError":
        """Read the API's error shape, or describe an answer not in it."""
        try:
            e = json.loads(body)["error"]
            code = e["code"]
            if not isinstance(code, str) or not code:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            text = body.decode("utf-8", "replace").strip()
            if len(text) > 200:
                text = text[:200] + "…"
            return cls("unexpected_response", f"HTTP {status}: {text}", status=status, raw=body)
        problems = [Problem(p.get("code", ""), p.get("path", ""), p.get("message", ""))
                    for p in e.get("problems") or [] if isinstance(p, dict)]
        return cls(code, e.get("message", ""), problems, status=status, reason=e.get("reason"),
                   call_id=e.get("call_id"), hint=e.get("hint"), raw=body, countered_by=e.get("countered_by"))


class ConsoleUnreachable(CountersignError):
    """The console did not answer: refused, reset, timed out (code
    ``unavailable``, no status). Nothing can be assumed about a request that
    was cut short, but wait() rides out such an outage."""

    def __init__(self, url: str, method: str, path: str, cause: Any):
        super().__init__("unavailable", f"{method} {url}{path}: the console did not answer ({cause}); try again later")


class DigestError(CountersignError):
    """A value the console would refuse to hash; raised before anything is
    sent. The problems use the console's codes (float_not_allowed,
    out_of_range, invalid_utf8, too_deep, ...) and JSON Pointers."""


class DigestMismatch(CountersignError):
    """The console's digest of a call is not the one recomputed here from
    what was asked for (code ``digest_mismatch``)."""

    def __init__(self, call_id: str, server: str, local: str):
        super().__init__("digest_mismatch",
                         f"the console's digest {server} for {call_id} is not {local}, the digest of the call as proposed",
                         call_id=call_id)
        self.server_digest = server
        self.local_digest = local


class NotApproved(CountersignError):
    """The call ended without a grant: ``code`` is its status (denied,
    expired, cancelled, countered). ``call`` is the call as the console
    returned it; for a denial, ``reason`` and ``by`` say who refused it and
    why. For a call an operator answered with an edited one (countered),
    ``counter`` is that edited call (its id, envelope and digest) and
    ``changes`` says, one phrase per member, what the operator changed; the
    call did not run."""

    def __init__(self, call: Any):
        self.call = call
        self.by: Optional[str] = None
        self.counter: Optional[dict] = None
        self.changes: list[str] = []
        status = call.status
        cb = getattr(call, "countered_by", None)
        if status == "denied" and call.decision:
            self.by = call.decision.by
            reason = call.decision.reason
            message = f"{self.by} denied {call.tool} on {call.target}: {reason}"
        elif status == "expired":
            reason, message = None, f"nobody decided {call.tool} on {call.target} before {call.decide_by}; propose it again if it is still needed"
        elif status == "countered" and isinstance(cb, dict):
            self.counter, self.changes = cb, counter_changes(call, cb)
            env = cb.get("envelope") or {}
            message = (f"an operator did not approve {call.tool} on {call.target} as it was and proposed an edited call "
                       f"instead: {'; '.join(self.changes)}. This call did not run and will not. To run the edited call, "
                       f"call the tool again with exactly these arguments: "
                       f"{json.dumps(env.get('args', {}), separators=(',', ':'), ensure_ascii=False)}")
            if env.get("target", call.target) != call.target:
                message += f" (target {env.get('target')})"
            reason = None
        else:
            reason, message = None, f"{call.tool} on {call.target} is {status}"
        super().__init__(status, message, reason=reason, call_id=call.id)

    @property
    def refusal(self) -> bool:
        """Always: the call was denied, expired, cancelled or countered."""
        return True


def counter_changes(call: Any, counter: dict) -> list[str]:
    """What an operator changed from call to its counter-proposal (a
    countered call's ``countered_by``), one phrase per member: the target,
    and each top-level argument changed, set or removed (values as JSON)."""
    env = counter.get("envelope") or {}
    out: list[str] = []
    enc = lambda v: json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False)  # noqa: E731
    if env.get("target", call.target) != call.target:
        out.append(f"target {json.dumps(call.target)} changed to {json.dumps(env.get('target'))}")
    was, now = call.args or {}, env.get("args") or {}
    for k, v in now.items():
        if k not in was:
            out.append(f"{k} set to {enc(v)}")
        elif enc(was[k]) != enc(v):
            out.append(f"{k} changed from {enc(was[k])} to {enc(v)}")
    for k, v in was.items():
        if k not in now:
            out.append(f"{k} removed (was {enc(v)})")
    return out


class WaitTimeout(CountersignError):
    """The call was still pending when the wait ended (code ``wait_timeout``);
    ``call`` is the last state seen."""

    def __init__(self, call: Any):
        self.call = call
        super().__init__("wait_timeout", f"{call.id} is still pending: no operator has decided yet", call_id=call.id)


class RedemptionRejected(CountersignError):
    """The console refused the grant (code = the reason: expired, replayed,
    digest_mismatch, ...); ``redemption`` holds every check. The call must
    not run."""

    def __init__(self, redemption: Any):
        self.redemption = redemption
        super().__init__(redemption.reason or "rejected",
                         redemption.message or f"the grant was refused: {redemption.reason}",
                         status=redemption.status_code, reason=redemption.reason, call_id=redemption.call_id)

    @property
    def refusal(self) -> bool:
        """True when the grant was refused for something the model can act
        on: the call presented differs from the one approved (tool, target or
        arguments), the grant expired, was revoked, was already used, or the
        tool changed since. False when it points at the deployment, not the
        call (another agent's token, a key or signature this console does not
        accept, a clock ahead of the console's, a malformed grant, a reason
        this client does not know): the application must see those. Either
        way the call did not run."""
        return self.reason in _REFUSED_GRANT_REASONS
