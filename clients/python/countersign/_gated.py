"""The gated decorator: a function that runs only with a redeemed grant."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import time
from typing import Any, Callable, Iterable, Optional, TypeVar, Union

from ._async import AsyncClient, start
from ._canonical import NumberPaths
from ._client import Client
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
          max_heartbeat: float = DEFAULT_MAX_HEARTBEAT, accept_counter: bool = False) -> Callable[[F], F]:
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

    An ``async def`` function gets an async wrapper that does the same
    without blocking the event loop: each request runs in a thread of its
    own (see AsyncClient), and the heartbeats are an asyncio task, cancelled
    before the outcome is reported (so a function that blocks the loop holds
    up its heartbeats too: run blocking work with asyncio.to_thread). Cancelling the awaiting task while the
    function runs reports ``unknown`` (it may have done part of its work: a
    person finds out) and raises CancelledError again; cancelled before the
    function started, nothing runs (a grant already redeemed is reported
    ``failed``, saying nothing ran), and a call still pending stays pending,
    as after a WaitTimeout. Likewise a KeyboardInterrupt (any exception
    that is not an Exception) while a synchronous function runs reports
    ``unknown``. A synchronous gated function called on the thread of a
    running event loop logs a warning: it stops the loop while it waits.

    Generator and async generator functions are refused here (TypeError):
    calling one runs none of its body, so the outcome would be reported
    before any work was done. A synchronous function that returns a
    coroutine, generator or other awaitable is reported ``unknown`` and
    raises TypeError (a coroutine or generator is closed unrun): gate the
    async function itself.

    When an operator answers the call with an edited one (a
    counter-proposal), NotApproved is raised with code ``countered``,
    carrying the counter and what changed (``counter``, ``changes``), and
    nothing runs, unless ``accept_counter=True``: then the counter is
    accepted, waited for, redeemed, and the function runs with the edited
    arguments (a resubmission refused as previously_countered accepts the
    counter it names too). Proposing exactly a counter's call accepts it.

    ``client`` is a Client or an AsyncClient; it defaults to
    Client.from_env() (COUNTERSIGN_URL, COUNTERSIGN_TOKEN), read at each
    call.

    >>> @gated("tickets.close", target=lambda a: f"ticket:{a['ticket']}")
    ... def close(ticket, resolution): ...

    >>> @gated("tickets.close", target=lambda a: f"ticket:{a['ticket']}")
    ... async def close(ticket, resolution): ...
    """
    informational = tuple(informational)

    def decorate(fn: F) -> F:
        kind = _kind(fn)
        if kind in ("generator", "async generator"):
            article = "an" if kind == "async generator" else "a"
            raise TypeError(f"gated: {_name(fn)} is {article} {kind} function: calling it "
                            f"runs none of its body, so the outcome would be reported before any work was done; gate "
                            f"a function that does the work and returns its result (a list, not a {kind})")
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
                raise TypeError(f"gated: {_name(fn)} has the parameter {p.name} that cannot be passed by name; "
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

        def plan(a: tuple, kw: dict) -> tuple[dict, str, Optional[str]]:
            args = proposed_args(a, kw)
            tgt = target(args) if callable(target) else target
            why = rationale(args) if callable(rationale) else rationale
            return args, tgt, why

        def every(redemption: Any) -> Optional[float]:
            if not heartbeat:
                return None
            e = heartbeat_every if heartbeat_every is not None else redemption.outcome_within / 3
            return max(e, 0.2) if e > 0 else None

        if kind == "coroutine":
            @functools.wraps(fn)
            async def async_wrapper(*a: Any, **kw: Any) -> Any:
                c = client if isinstance(client, AsyncClient) else AsyncClient.from_client(_sync_client(client))
                args, tgt, why = plan(a, kw)
                try:
                    call, proposed = await c.submit(tool, tgt, args, rationale=why), True
                except CountersignError as e:
                    if not (accept_counter and e.code == "previously_countered" and e.countered_by):
                        raise
                    call, proposed = await c.accept(e.countered_by), False
                if verify_digest and proposed:
                    c.verify_digest(call, args=args, informational=informational, number_paths=number_paths)
                if call.countered_from and call.accepted_at is None and call.status == "pending":
                    call = await c.accept(call.id)
                if not call.decided:
                    call = await c.wait(call.id, timeout=timeout)
                if call.status == "countered" and call.countered_by and accept_counter:
                    call = await c.accept(call.countered_by["id"])
                    if not call.decided:
                        call = await c.wait(call.id, timeout=timeout)
                if call.status != "approved":
                    raise NotApproved(call)
                redemption = await _redeem(c, call)
                if not redemption.accepted:
                    raise RedemptionRejected(redemption)
                e = every(redemption)
                beats = AsyncHeartbeats(c, call.id, e, max_heartbeat) if e else None
                try:
                    result = await fn(**call.args)
                except Exception as err:
                    await _finish(c, call.id, beats, "failed", f"{type(err).__name__}: {err}")
                    raise
                except BaseException as err:  # cancelled while it ran
                    await _finish(c, call.id, beats, "unknown", _interrupted(err))
                    raise
                await _finish(c, call.id, beats, "succeeded", None)
                return result

            async_wrapper.countersign_tool = tool  # type: ignore[attr-defined]
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*a: Any, **kw: Any) -> Any:
            if _on_event_loop():
                _log.warning("countersign: %s is a def called on the thread of a running event loop: the loop stops "
                             "while the call waits for a person; gate an async def, or call it with asyncio.to_thread",
                             _name(fn))
            c = _sync_client(client)
            args, tgt, why = plan(a, kw)
            try:
                call, proposed = c.submit(tool, tgt, args, rationale=why), True
            except CountersignError as e:
                if not (accept_counter and e.code == "previously_countered" and e.countered_by):
                    raise
                call, proposed = c.accept(e.countered_by), False
            if verify_digest and proposed:
                c.verify_digest(call, args=args, informational=informational, number_paths=number_paths)
            if call.countered_from and call.accepted_at is None and call.status == "pending":
                call = c.accept(call.id)
            if not call.decided:
                call = c.wait(call.id, timeout=timeout)
            if call.status == "countered" and call.countered_by and accept_counter:
                call = c.accept(call.countered_by["id"])
                if not call.decided:
                    call = c.wait(call.id, timeout=timeout)
            if call.status != "approved":
                raise NotApproved(call)
            redemption = c.redeem(call.grant, call)
            if not redemption.accepted:
                raise RedemptionRejected(redemption)
            e = every(redemption)
            beats = Heartbeats(c, call.id, e, max_heartbeat) if e else None
            try:
                result = fn(**call.args)
            except Exception as err:
                if beats:
                    beats.stop()
                _report(c, call.id, "failed", f"{type(err).__name__}: {err}")
                raise
            except BaseException as err:  # KeyboardInterrupt, SystemExit: stopped where it was
                if beats:
                    beats.stop()
                _report(c, call.id, "unknown", _interrupted(err))
                raise
            if beats:
                beats.stop()
            unrun = _unrun(result)
            if unrun:
                _report(c, call.id, "unknown", unrun)
                raise TypeError(f"gated: {_name(fn)} {unrun}")
            _report(c, call.id, "succeeded", None)
            return result

        wrapper.countersign_tool = tool  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def _last_beat(call_id: str, e: Exception) -> bool:
    """Log a heartbeat that was not sent; True when the console says no
    later one can succeed, and heartbeats stop."""
    if isinstance(e, CountersignError) and e.code in _FINAL:
        _log.warning("countersign: heartbeats of %s stopped: %s", call_id, e)
        return True
    _log.info("countersign: heartbeat of %s not sent, trying at the next: %s", call_id, e)
    return False


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
            except Exception as e:  # noqa: BLE001 - a heartbeat must never break the function it guards
                if _last_beat(self.call_id, e):
                    return
                continue
            self.sent += 1

    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Stop sending and wait for a heartbeat under way to end."""
        self._stop.set()
        self._thread.join()


class AsyncHeartbeats:
    """Heartbeats for a redeemed call as an asyncio task, each sent from a
    thread of its own, every ``every`` seconds until stop() or until
    ``limit`` seconds have passed, or until the console says no heartbeat
    can succeed any more. ``sent`` counts those the console accepted."""

    def __init__(self, client: Any, call_id: str, every: float, limit: float):
        self.client, self.call_id, self.every, self.limit = client, call_id, every, limit
        self.sent = 0
        self._inflight: Optional[asyncio.Future] = None
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"countersign-heartbeat-{call_id}")

    async def _run(self) -> None:
        deadline = time.monotonic() + self.limit
        while True:
            await asyncio.sleep(self.every)
            if time.monotonic() + self.every > deadline:
                _log.warning("countersign: %s still runs after %.0f s of heartbeats; its lease is left to end",
                             self.call_id, self.limit)
                return
            self._inflight = beat = start("heartbeat-" + self.call_id, self.client.sync.heartbeat, self.call_id)
            await asyncio.wait([beat])  # cancelled here, the heartbeat still ends: stop() waits for it
            try:
                beat.result()
            except Exception as e:  # noqa: BLE001 - a heartbeat must never break the function it guards
                if _last_beat(self.call_id, e):
                    return
                continue
            self.sent += 1

    def running(self) -> bool:
        return not self._task.done()

    async def stop(self) -> None:
        """Stop sending and wait for a heartbeat under way to end."""
        self._task.cancel()
        await asyncio.wait([self._task])
        if self._inflight is not None:
            await asyncio.wait([self._inflight])


async def _redeem(c: Any, call: Any) -> Any:
    """Redeem for an async gated function. Cancelled while the redemption
    is under way, the function will not run: a redemption the console
    accepted all the same is reported failed, saying so."""
    fut = start("redeem-" + call.id, c.sync.redeem, call.grant, call)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        fut.add_done_callback(functools.partial(_abandoned, c.sync, call.id))
        raise


def _abandoned(c: Any, call_id: str, fut: asyncio.Future) -> None:
    if fut.cancelled() or fut.exception() is not None or not fut.result().accepted:
        return
    threading.Thread(target=_report, args=(c, call_id, "failed", "cancelled before it ran: nothing was run"),
                     name=f"countersign-outcome-{call_id}", daemon=True).start()


async def _finish(c: Any, call_id: str, beats: Optional[AsyncHeartbeats], status: str, detail: Optional[str]) -> None:
    """Stop the heartbeats, then report the outcome. The report is sent even
    when the task is cancelled again meanwhile (it is then not waited for)."""
    try:
        if beats:
            await beats.stop()
    finally:
        sent = start("outcome-" + call_id, _report, c.sync, call_id, status, detail)
    await asyncio.wait([sent])


def _sync_client(client: Any) -> Any:
    if client is None:
        return Client.from_env()
    return client.sync if isinstance(client, AsyncClient) else client


def _on_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _kind(fn: Any) -> str:
    """What calling fn gives: "coroutine", "generator", "async generator",
    or "plain". A callable object is judged by its __call__."""
    candidates = [fn]
    if not inspect.isroutine(fn) and not inspect.isclass(fn) and not isinstance(fn, functools.partial):
        candidates.append(getattr(fn, "__call__", None))
    for f in candidates:
        if f is None:
            continue
        if inspect.isasyncgenfunction(f):
            return "async generator"
        if inspect.isgeneratorfunction(f):
            return "generator"
        if inspect.iscoroutinefunction(f):
            return "coroutine"
    return "plain"


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)


def _unrun(result: Any) -> Optional[str]:
    """Why a synchronous function's result means its work was not done when
    it returned, or None. A coroutine or generator is closed, so its body
    never runs."""
    if inspect.iscoroutine(result):
        result.close()
        return "returned a coroutine without running it (it was closed): gate the async def itself, gated awaits it"
    if inspect.isgenerator(result):
        result.close()
        return ("returned a generator without running it (it was closed): gate a function that does the work "
                "and returns its result")
    if inspect.isasyncgen(result):
        return "returned an async generator without running it: gate an async def that does the work and returns its result"
    if inspect.isawaitable(result):
        return f"returned an awaitable ({type(result).__name__}) that may still be running: gate an async def that awaits it"
    return None


def _interrupted(e: BaseException) -> str:
    what = "cancelled" if isinstance(e, asyncio.CancelledError) else f"interrupted ({type(e).__name__})"
    return f"{what} while it ran: it may have done part of its work"


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
