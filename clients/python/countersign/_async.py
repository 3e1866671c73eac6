"""The agent API for asyncio code: Client's requests, each run in a thread
of its own so that the event loop never blocks."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from ._canonical import NumberPaths
from ._client import Call, CallLike, Client, Lease, Plan, Redemption


def start(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.Future:
    """Run fn(*args, **kwargs) in a new daemon thread named
    ``countersign-{name}`` (with a copy of the caller's context, as
    asyncio.to_thread does) and return a future of its result.

    Not the loop's default executor: a wait is held for as long as a person
    takes to decide, and a handful of them (the default pool has
    min(32, cores + 4) threads) would leave no thread for the application's
    own asyncio.to_thread work. Cancelling the future leaves the thread to
    finish; its result is then dropped."""
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    # A future whose awaiting task was cancelled may still end with an
    # exception nobody reads: do not log it as "never retrieved".
    fut.add_done_callback(_retrieve)
    ctx = contextvars.copy_context()

    def run() -> None:
        value, error = None, None
        try:
            value = ctx.run(fn, *args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            error = e
        try:
            loop.call_soon_threadsafe(_settle, fut, value, error)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name="countersign-" + name, daemon=True).start()
    return fut


def _settle(fut: asyncio.Future, value: Any, error: Optional[BaseException]) -> None:
    if fut.done():  # cancelled: the caller stopped waiting
        return
    if error is None:
        fut.set_result(value)
    else:
        fut.set_exception(error)


def _retrieve(fut: asyncio.Future) -> None:
    if not fut.cancelled():
        fut.exception()


class AsyncClient:
    """Client for asyncio code: the same methods, as coroutines, with the
    same answers and exceptions. Each request runs in a thread of its own
    (the client is the standard library's urllib), so the event loop goes on
    while a call waits for a person.

    >>> c = AsyncClient.from_env()
    >>> call = await c.submit("payments.refund", "invoice:INV-1042",
    ...                       {"amount_minor": 1299, "currency": "USD", "reason_code": "duplicate"})
    >>> call = await c.wait(call.id)

    Cancelling a request stops waiting for it at once; one already sent
    still reaches the console (a cancelled submit may leave a pending call,
    a cancelled redeem may have started the lease). A cancelled wait stops
    polling after the poll under way (at most ``poll_wait`` seconds).
    """

    def __init__(self, url: str, token: str, **kwargs: Any):
        self.sync = Client(url, token, **kwargs)

    @classmethod
    def from_env(cls, **kwargs: Any) -> "AsyncClient":
        """As Client.from_env: COUNTERSIGN_URL and COUNTERSIGN_TOKEN."""
        return cls.from_client(Client.from_env(**kwargs))

    @classmethod
    def from_client(cls, client: Client) -> "AsyncClient":
        """An AsyncClient that sends its requests through ``client``."""
        ac = cls.__new__(cls)
        ac.sync = client
        return ac

    @property
    def url(self) -> str:
        return self.sync.url

    async def submit(self, tool: str, target: str, args: Optional[Mapping[str, Any]] = None,
                     rationale: Optional[str] = None) -> Call:
        """See Client.submit."""
        return await start("submit", self.sync.submit, tool, target, args, rationale)

    async def submit_json(self, body: Union[bytes, str]) -> Call:
        """See Client.submit_json."""
        return await start("submit", self.sync.submit_json, body)

    async def get(self, call_id: str) -> Call:
        """See Client.get."""
        return await start("get-" + call_id, self.sync.get, call_id)

    async def wait(self, call_id: str, timeout: Optional[float] = None) -> Call:
        """See Client.wait."""
        stop = threading.Event()
        try:
            return await start("wait-" + call_id, self.sync._wait, call_id, timeout, stop)
        except asyncio.CancelledError:
            stop.set()
            raise

    async def accept(self, call_id: str) -> Call:
        """See Client.accept."""
        return await start("accept-" + call_id, self.sync.accept, call_id)

    async def redeem(self, grant: str, call: CallLike) -> Redemption:
        """See Client.redeem."""
        return await start("redeem", self.sync.redeem, grant, call)

    async def report_outcome(self, call_id: str, status: str, detail: Optional[str] = None) -> Call:
        """See Client.report_outcome."""
        return await start("outcome-" + call_id, self.sync.report_outcome, call_id, status, detail)

    async def heartbeat(self, call_id: str, extend: Optional[float] = None) -> Lease:
        """See Client.heartbeat."""
        return await start("heartbeat-" + call_id, self.sync.heartbeat, call_id, extend)

    async def cancel(self, call_id: str) -> Call:
        """See Client.cancel."""
        return await start("cancel-" + call_id, self.sync.cancel, call_id)

    async def submit_plan(self, items: Iterable[Mapping[str, Any]], rationale: str, *, ordered: bool = False) -> Plan:
        """See Client.submit_plan."""
        return await start("submit-plan", self.sync.submit_plan, items, rationale, ordered=ordered)

    async def get_plan(self, plan_id: str) -> Plan:
        """See Client.get_plan."""
        return await start("get-plan-" + plan_id, self.sync.get_plan, plan_id)

    async def cancel_plan(self, plan_id: str) -> Plan:
        """See Client.cancel_plan."""
        return await start("cancel-plan-" + plan_id, self.sync.cancel_plan, plan_id)

    async def mint_item(self, plan_id: str, n: int) -> Call:
        """See Client.mint_item."""
        return await start("mint-" + plan_id, self.sync.mint_item, plan_id, n)

    async def keys(self) -> dict:
        """See Client.keys."""
        return await start("keys", self.sync.keys)

    def verify_digest(self, call: Call, *, args: Optional[Mapping[str, Any]] = None,
                      informational: Iterable[str] = (), number_paths: NumberPaths = None) -> str:
        """See Client.verify_digest (computed here; nothing is sent)."""
        return self.sync.verify_digest(call, args=args, informational=informational, number_paths=number_paths)

    def gated(self, tool: str, **kwargs: Any):
        """The gated decorator bound to this client; see countersign.gated."""
        from ._gated import gated

        return gated(tool, client=self, **kwargs)
