"""The gated decorator: a function that runs only with a redeemed grant."""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
from typing import Any, Callable, Iterable, Optional, TypeVar, Union

from ._canonical import NumberPaths
from ._errors import CountersignError, NotApproved, RedemptionRejected

F = TypeVar("F", bound=Callable[..., Any])
_log = logging.getLogger("countersign")
MAX_DETAIL = 1000
#: How long, in all, a gated function's lease is kept alive by heartbeats
#: unless told otherwise: a function that runs longer loses its lease, and
#: the call waits for a person (its outcome is still accepted when it
#: returns).
DEFAULT_MAX_HEARTBEAT = 3600.0
#: The console's answers after which no heartbeat can succeed.
_FINAL = frozenset({"lease_expired", "not_lease_holder", "not_redeemed", "outcome_already_reported", "not_found"})


def gated(tool: str, *, target: Union[str, Callable[[dict], str]],
          rationale: Union[None, str, Callable[[dict], Optional[str]]] = None, client: Any = None,
          timeout: Optional[float] = None, verify_digest: bool = False, informational: Iterable[str] = (),
          number_paths: NumberPaths = None, heartbeat: bool = True, heartbeat_every: Optional[float] = None,
          max_heartbeat: float = DEFAULT_MAX_HEARTBEAT) -> Callable[[F], F]:
    """Gate a function behind an operator's approval.

    Each call of the decorated function proposes ``tool`` with the
    arguments it was called with (by parameter name; defaults that were not
    passed are not proposed) and ``target`` (a string, or a function of the
    arguments), waits for the decision, redeems the grant, runs the function
    with exactly the redeemed arguments, and reports the outcome: an
    exception reports ``failed`` and is raised again; a return reports
    ``succeeded``.

    It raises, before the function runs: CountersignError for a refused
    proposal (code and problems for the model), NotApproved when the call was
    denied (``reason``, ``by``), expired or cancelled, WaitTimeout when
    ``timeout`` seconds passed first, RedemptionRejected when the grant was
    refused. With ``verify_digest`` the console's digest is first checked
    against one recomputed here (``informational`` and ``number_paths`` as
    for Client.verify_digest), raising DigestMismatch.

    While the function runs, a thread sends heartbeats that keep the
    executor's lease alive (every third of the tool's outcome_within, or
    every ``heartbeat_every`` seconds), for at most ``max_heartbeat``
    seconds in all; they stop before the outcome is reported. A heartbeat
    the console refuses for good (the lease already expired) stops them; a
    console that is briefly unreachable is tried again at the next beat.
    ``heartbeat=False`` sends none.

    ``client`` defaults to Client.from_env() (COUNTERSIGN_URL,
    COUNTERSIGN_TOKEN), read at each call.

    >>> @gated("tickets.close", target=lambda a: f"ticket:{a['ticket']}")
    ... def close(ticket, resolution): ...
    """
    informational = tuple(informational)

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
                raise TypeError(f"gated: {fn.__qualname__} has the parameter {p.name} that cannot be passed by name; "
                                "a gated call's arguments are a JSON object")

        def proposed_args(a: tuple, kw: dict) -> dict:
            bound = sig.bind(*a, **kw)
            args: dict[str, Any] = {}
            for name, value in bound.arguments.items():
                if sig.parameters[name].kind == inspect.Parameter.VAR_KEYWORD:
                    args.update(value)
                else:
                    args[name] = value
            return args

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            from ._client import Client

            c = client if client is not None else Client.from_env()
            args = proposed_args(a, kw)
            tgt = target(args) if callable(target) else target
            why = rationale(args) if callable(rationale) else rationale
            call = c.submit(tool, tgt, args, rationale=why)
            if verify_digest:
                c.verify_digest(call, args=args, informational=informational, number_paths=number_paths)
            if not call.decided:
                call = c.wait(call.id, timeout=timeout)
            if call.status != "approved":
                raise NotApproved(call)
            redemption = c.redeem(call.grant, call)
            if not redemption.accepted:
                raise RedemptionRejected(redemption)
            beats = None
            if heartbeat:
                every = heartbeat_every if heartbeat_every is not None else redemption.outcome_within / 3
                if every > 0:
                    beats = Heartbeats(c, call.id, max(every, 0.2), max_heartbeat)
            try:
                result = fn(**call.args)
            except BaseException as e:
                if beats:
                    beats.stop()
                _report(c, call.id, "failed", f"{type(e).__name__}: {e}")
                raise
            if beats:
                beats.stop()
            _report(c, call.id, "succeeded", None)
            return result

        wrapper.countersign_tool = tool  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


class Heartbeats:
    """Sends heartbeats for a redeemed call from a thread of its own, every
    ``every`` seconds, until stop() or until ``limit`` seconds have passed,
    or until the console says no heartbeat can succeed any more.
    ``sent`` counts those the console accepted."""

    def __init__(self, client: Any, call_id: str, every: float, limit: float):
        self.client, self.call_id, self.every, self.limit = client, call_id, every, limit
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"countersign-heartbeat-{call_id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + self.limit
        while not self._stop.wait(self.every):
            if time.monotonic() + self.every > deadline:
                _log.warning("countersign: %s still runs after %.0f s of heartbeats; its lease is left to end",
                             self.call_id, self.limit)
                return
            try:
                self.client.heartbeat(self.call_id)
                self.sent += 1
            except CountersignError as e:
                if e.code in _FINAL:
                    _log.warning("countersign: heartbeats of %s stopped: %s", self.call_id, e)
                    return
                _log.info("countersign: heartbeat of %s not sent, trying at the next: %s", self.call_id, e)
            except Exception as e:  # noqa: BLE001 - a heartbeat must never break the function it guards
                _log.info("countersign: heartbeat of %s not sent, trying at the next: %s", self.call_id, e)

    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop sending and wait for a heartbeat under way to end."""
        self._stop.set()
        self._thread.join()


def _report(c: Any, call_id: str, status: str, detail: Optional[str]) -> None:
    # The tool has run: failing to report must not turn its result into an
    # error (a caller might run it again). The console records a missing
    # outcome when the execution lease ends.
    if detail and len(detail) > MAX_DETAIL:
        detail = detail[: MAX_DETAIL - 1] + "…"
    try:
        c.report_outcome(call_id, status, detail)
    except Exception as e:  # noqa: BLE001
        _log.warning("countersign: could not report outcome %s of %s: %s", status, call_id, e)
