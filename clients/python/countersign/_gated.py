"""The gated decorator: a function that runs only with a redeemed grant."""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable, Iterable, Optional, TypeVar, Union

from ._canonical import NumberPaths
from ._errors import NotApproved, RedemptionRejected

F = TypeVar("F", bound=Callable[..., Any])
_log = logging.getLogger("countersign")
MAX_DETAIL = 1000


def gated(tool: str, *, target: Union[str, Callable[[dict], str]],
          rationale: Union[None, str, Callable[[dict], Optional[str]]] = None, client: Any = None,
          timeout: Optional[float] = None, verify_digest: bool = False, informational: Iterable[str] = (),
          number_paths: NumberPaths = None) -> Callable[[F], F]:
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
            try:
                result = fn(**call.args)
            except BaseException as e:
                _report(c, call.id, "failed", f"{type(e).__name__}: {e}")
                raise
            _report(c, call.id, "succeeded", None)
            return result

        wrapper.countersign_tool = tool  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


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
