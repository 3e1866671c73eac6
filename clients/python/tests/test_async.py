"""Async code against a real `console serve` on 127.0.0.1: the gated
decorator on an `async def` (approved, raising, denied, refused, cancelled
while waiting, while redeeming and while running), heartbeats as a task,
the event loop left free while a call waits for a person, and AsyncClient."""

import asyncio
import concurrent.futures
import faulthandler
import functools
import sys
import inspect
import threading
import time
import unittest
from datetime import datetime, timedelta, timezone

import countersign
from countersign import AsyncClient, Client, CountersignError, NotApproved, RedemptionRejected, WaitTimeout, gated

from .harness import OPERATOR, Console

console: Console


def setUpModule():
    global console
    console = Console()


def tearDownModule():
    console.stop()


class CountingClient(Client):
    """Hands every submitted call to the test (which decides it), counts
    the heartbeats the console accepted, and can hold a redemption until
    the test lets it go."""

    def __init__(self, *a, hold_redemption: bool = False, **kw):
        super().__init__(*a, **kw)
        self.cv = threading.Condition()
        self.submitted: list = []
        self.beats = 0
        self.redeemed = threading.Event()
        self.release = threading.Event()
        if not hold_redemption:
            self.release.set()

    def submit(self, *a, **kw):
        call = super().submit(*a, **kw)
        with self.cv:
            self.submitted.append(call)
            self.cv.notify_all()
        return call

    def heartbeat(self, call_id, extend=None):
        lease = super().heartbeat(call_id, extend)
        self.beats += 1
        return lease

    def redeem(self, grant, call):
        r = super().redeem(grant, call)
        self.redeemed.set()
        self.release.wait(60)
        return r

    async def next_submitted(self, limit: float = 30.0):
        def take():
            with self.cv:
                if not self.cv.wait_for(lambda: self.submitted, limit):
                    raise AssertionError("nothing was submitted")
                return self.submitted.pop(0)

        return await asyncio.to_thread(take)


_n = 0


def client(**kwargs) -> CountingClient:
    """A client with a token for an actor of its own."""
    global _n
    _n += 1
    return CountingClient(console.url, console.token(f"agent:py-async-{_n}"), **kwargs)


async def until(what: str, cond, limit: float = 30.0):
    """Poll cond (a function, sync or async) until it returns something
    true."""
    deadline = time.monotonic() + limit
    while True:
        v = cond()
        if inspect.isawaitable(v):
            v = await v
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def threads_of(call_id: str) -> list:
    return [t.name for t in threading.enumerate() if t.name.startswith("countersign-") and t.name.endswith(call_id)]


def heartbeat_tasks() -> list:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("countersign-heartbeat-")]


async def approve(call):
    return await asyncio.to_thread(console.approve, call.id, call.digest)


async def outcome_of(c: Client, call_id: str):
    """The call once an outcome is on it."""
    return await until(f"an outcome of {call_id}",
                       lambda: asyncio.to_thread(lambda: (g := c.get(call_id)).outcome and g))


class Bounded(unittest.IsolatedAsyncioTestCase):
    """A test whose event loop is blocked (the regression these tests look
    for) would hang for good, with nothing printed: after HANG seconds the
    process prints every thread's stack and exits instead."""

    HANG = 180

    def setUp(self):
        faulthandler.dump_traceback_later(self.HANG, exit=True)

    def tearDown(self):
        faulthandler.cancel_dump_traceback_later()


class AsyncGated(Bounded):
    async def test_runs_once_with_the_redeemed_arguments(self):
        c = client()
        ran = []

        @gated("tests.echo", target="echo:async", client=c, timeout=30)
        async def echo(text, items=None, count=None, note=None):
            await asyncio.sleep(0)
            ran.append({"text": text, "items": items, "count": count, "note": note})
            return {"echoed": text}

        self.assertTrue(inspect.iscoroutinefunction(echo))
        self.assertEqual((echo.__name__, echo.countersign_tool), ("echo", "tests.echo"))
        # A tuple is proposed as a JSON array: the function receives the
        # redeemed arguments (a list), not the objects it was called with.
        task = asyncio.create_task(echo("héllo", items=({"name": "a", "qty": 2},), count=9007199254740991))
        call = await c.next_submitted()
        want = {"text": "héllo", "items": [{"name": "a", "qty": 2}], "count": 9007199254740991}
        self.assertEqual(call.args, want)
        # The decorator long-polls while this test, on the same event loop,
        # goes on: a blocked loop would never get here (the wait would end
        # in WaitTimeout after 30 s instead).
        await asyncio.to_thread(console.wait_for_waiters, 1)
        self.assertEqual(ran, [], "nothing runs before approval")
        self.assertFalse(task.done())
        await approve(call)
        self.assertEqual(await task, {"echoed": "héllo"})
        self.assertEqual(ran, [dict(want, note=None)])
        self.assertIsInstance(ran[0]["items"], list)
        done = await outcome_of(c, call.id)
        self.assertEqual((done.status, done.outcome.status, done.outcome.detail), ("redeemed", "succeeded", ""))
        self.assertEqual(heartbeat_tasks(), [])
        await until("its threads to end", lambda: not threads_of(call.id))
        self.assertEqual(len(ran), 1)

    async def test_an_exception_is_failed(self):
        c = client()

        @gated("tests.echo", target="echo:raises", client=c)
        async def boom(text):
            await asyncio.sleep(0)
            raise RuntimeError("the upstream said no")

        task = asyncio.create_task(boom(text="x"))
        call = await c.next_submitted()
        await approve(call)
        with self.assertRaisesRegex(RuntimeError, "the upstream said no"):
            await task
        done = await asyncio.to_thread(c.get, call.id)
        self.assertEqual((done.outcome.status, done.outcome.detail), ("failed", "RuntimeError: the upstream said no"))
        self.assertEqual(heartbeat_tasks(), [])

    async def test_denial_raises_what_the_sync_path_raises(self):
        c = client()
        ran = []

        @gated("tests.echo", target="echo:denied", client=c)
        async def async_echo(text):
            ran.append(text)

        @gated("tests.echo", target="echo:denied", client=c)
        def sync_echo(text):
            ran.append(text)

        errors = []
        for call_it in (lambda: asyncio.to_thread(sync_echo, text="sync"), lambda: async_echo(text="async")):
            task = asyncio.create_task(call_it())
            call = await c.next_submitted()
            await asyncio.to_thread(console.deny, call.id, "not this echo: the customer asked for none")
            with self.assertRaises(NotApproved) as cm:
                await task
            e = cm.exception
            self.assertEqual(e.call.id, call.id)
            errors.append((type(e), e.code, e.reason, e.by, e.message, e.to_dict()["error"].keys(),
                           e.to_json().replace(call.id, "CALL")))
        self.assertEqual(errors[0], errors[1])
        self.assertEqual(errors[1][1:4], ("denied", "not this echo: the customer asked for none", OPERATOR))
        self.assertEqual(ran, [])

    async def test_expiry_refusal_and_a_spent_grant_run_nothing(self):
        c = client()
        ran = []

        @gated("tests.expiring", target="expiring:async", client=c)
        async def never(n):
            ran.append(n)

        with self.assertRaises(NotApproved) as cm:
            await never(n=1)
        self.assertEqual(cm.exception.code, "expired")

        @gated("tests.echo", target="echo:refused", client=c)
        async def echo(text, count=None):
            ran.append(text)

        with self.assertRaises(CountersignError) as cm:
            await echo(text="x", count=1.5)
        self.assertEqual(cm.exception.code, "float_not_allowed")

        @gated("tests.echo", target="echo:timeout", client=c, timeout=1)
        async def slow(text):
            ran.append(text)

        with self.assertRaises(WaitTimeout):
            await slow(text="nobody decides")

        # The grant is spent before the decorator presents it.
        spent = client()

        @gated("tests.echo", target="echo:spent", client=spent)
        async def replayed(text):
            ran.append(text)

        real = Client.redeem

        def redeem_twice(self_, grant, call):
            real(self_, grant, call)
            return real(self_, grant, call)

        spent.redeem = functools.partial(redeem_twice, spent)
        task = asyncio.create_task(replayed(text="once"))
        await approve(await spent.next_submitted())
        with self.assertRaises(RedemptionRejected) as cm:
            await task
        self.assertEqual((cm.exception.code, cm.exception.redemption.status_code), ("replayed", 409))
        self.assertEqual(ran, [])

    async def test_cancelled_while_running_is_unknown(self):
        c = client()
        started = asyncio.Event()
        seen = {}

        @gated("tests.lease", target="lease:cancelled", client=c)
        async def long_job(n):
            started.set()
            await asyncio.Event().wait()  # until cancelled

        task = asyncio.create_task(long_job(n=1))
        call = await c.next_submitted()
        await approve(call)
        await started.wait()
        # The heartbeat task keeps the lease (outcome_within 2 s) past its
        # first end while the function runs.
        first = (await asyncio.to_thread(c.get, call.id)).lease_until
        await until("the first lease's end to pass", lambda: datetime.now(timezone.utc) > first + timedelta(seconds=1.5))
        got = await asyncio.to_thread(c.get, call.id)
        seen.update(outcome=got.outcome, lease_until=got.lease_until)
        self.assertIsNone(seen["outcome"], "the lease expired while the function ran")
        self.assertGreater(seen["lease_until"], first)
        self.assertGreaterEqual(c.beats, 2)
        self.assertEqual(len(heartbeat_tasks()), 1)

        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        # Reported before the cancellation came back, heartbeats stopped
        # first, and nothing of it is left running.
        done = await asyncio.to_thread(c.get, call.id)
        self.assertEqual((done.status, done.outcome.status), ("redeemed", countersign.OUTCOME_UNKNOWN))
        self.assertEqual(done.outcome.detail, "cancelled while it ran: it may have done part of its work")
        self.assertEqual(heartbeat_tasks(), [])
        await until("its threads to end", lambda: not threads_of(call.id))
        beats = c.beats
        await asyncio.sleep(0.5)
        self.assertEqual(c.beats, beats)

    async def test_cancelled_while_waiting_runs_nothing(self):
        c = client(poll_wait=1.0)
        ran = []

        @gated("tests.echo", target="echo:abandoned", client=c)
        async def echo(text):
            ran.append(text)

        task = asyncio.create_task(echo(text="a"))
        call = await c.next_submitted()
        await until("the wait to start", lambda: threads_of(call.id))
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        # The wait's thread ends with the poll under way; the call stays
        # pending, and approving it now runs nothing.
        await until("the wait's thread to end", lambda: not threads_of(call.id))
        self.assertEqual((await asyncio.to_thread(c.get, call.id)).status, "pending")
        await approve(call)
        got = await asyncio.to_thread(c.get, call.id)
        self.assertEqual((got.status, got.outcome, ran), ("approved", None, []))

    async def test_cancelled_while_redeeming_is_failed_and_runs_nothing(self):
        c = client(hold_redemption=True)
        ran = []

        @gated("tests.echo", target="echo:redeeming", client=c)
        async def echo(text):
            ran.append(text)

        task = asyncio.create_task(echo(text="b"))
        call = await c.next_submitted()
        await approve(call)
        # The console accepted the redemption; its answer is held back
        # until the task is cancelled.
        await asyncio.to_thread(c.redeemed.wait, 30)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        c.release.set()
        done = await outcome_of(c, call.id)
        self.assertEqual((done.status, done.outcome.status, done.outcome.detail),
                         ("redeemed", "failed", "cancelled before it ran: nothing was run"))
        self.assertEqual(ran, [])

    async def test_a_timeout_while_it_runs_is_unknown(self):
        # asyncio.timeout cancels the task and, when the cancellation comes
        # back out of its block, turns it into TimeoutError: the decorator
        # reports, then lets the same cancellation through.
        c = client()
        started = asyncio.Event()

        @gated("tests.echo", target="echo:timed-out", client=c)
        async def forever(text):
            started.set()
            await asyncio.Event().wait()

        async def bounded():
            if not hasattr(asyncio, "timeout"):  # Python 3.10: wait_for, cancelled from outside
                return await asyncio.wait_for(forever(text="t"), None)
            async with asyncio.timeout(None) as cm:
                task = asyncio.create_task(forever(text="t"))
                await started.wait()
                cm.reschedule(asyncio.get_running_loop().time())  # the deadline is now
                return await task

        outer = asyncio.create_task(bounded())
        call = await c.next_submitted()
        await approve(call)
        await started.wait()
        if not hasattr(asyncio, "timeout"):
            outer.cancel()
        with self.assertRaises(TimeoutError if hasattr(asyncio, "timeout") else asyncio.CancelledError):
            await outer
        done = await asyncio.to_thread(c.get, call.id)
        self.assertEqual((done.outcome.status, done.outcome.detail),
                         ("unknown", "cancelled while it ran: it may have done part of its work"))
        self.assertEqual(heartbeat_tasks(), [])

    async def test_heartbeats_are_bounded_and_can_be_off(self):
        c = client()
        approved = asyncio.Queue()

        @gated("tests.lease", target="lease:async-stuck", client=c, heartbeat_every=0.3, max_heartbeat=1.0)
        async def stuck(n):
            # Heartbeats stop after a second: the lease then ends, and the
            # console records that nobody reported.
            got = await outcome_of(c, (await approved.get()).id)
            return got.outcome.status

        task = asyncio.create_task(stuck(n=7))
        call = await c.next_submitted()
        await approve(call)
        approved.put_nowait(call)
        self.assertEqual(await task, countersign.OUTCOME_LEASE_EXPIRED)
        self.assertLessEqual(c.beats, 3)
        self.assertEqual(heartbeat_tasks(), [])
        # The function's own report, late, replaces lease_expired.
        self.assertEqual((await asyncio.to_thread(c.get, call.id)).outcome.status, "succeeded")

        @gated("tests.lease", target="lease:async-none", client=c, heartbeat=False)
        async def quick(n):
            self.assertEqual(heartbeat_tasks(), [])
            await asyncio.sleep(0)
            return n

        beats = c.beats
        task = asyncio.create_task(quick(n=1))
        await approve(await c.next_submitted())
        self.assertEqual(await task, 1)
        self.assertEqual(c.beats, beats)

    async def test_a_def_called_on_the_loop_warns(self):
        # A synchronous gated function called from a coroutine stops the
        # loop while it waits: said in the log, before anything is sent.
        c = client()

        @gated("tests.echo", target="echo:on-loop", client=c)
        def sync_echo(text, count=None):
            return text

        with self.assertLogs("countersign", "WARNING") as logs:
            with self.assertRaises(CountersignError) as cm:
                sync_echo(text="x", count=1.5)  # refused by the console, so nothing waits
        self.assertEqual(cm.exception.code, "float_not_allowed")
        self.assertIn("sync_echo is a def called on the thread of a running event loop", logs.output[0])

        # From a thread of its own it does not warn.
        with self.assertNoLogs("countersign", "WARNING"):
            task = asyncio.create_task(asyncio.to_thread(sync_echo, text="y"))
            await approve(await c.next_submitted())
            self.assertEqual(await task, "y")

    async def test_the_default_executor_is_left_to_the_application(self):
        # Four calls wait for a person at once with a default executor of
        # two threads: the decorator's requests do not use it.
        loop = asyncio.get_running_loop()
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
        loop.set_default_executor(pool)
        c = client()

        @gated("tests.echo", target="echo:many", client=c)
        async def echo(text):
            return text

        tasks = [asyncio.create_task(echo(text=f"t{i}")) for i in range(4)]
        calls = [await c.next_submitted() for _ in tasks]
        await asyncio.to_thread(console.wait_for_waiters, 4)
        for call in calls:
            await approve(call)
        self.assertEqual(sorted(await asyncio.gather(*tasks)), ["t0", "t1", "t2", "t3"])

    async def test_callables_that_are_async(self):
        c = client()

        class Tool:
            async def __call__(self, text):
                return "object:" + text

        async def plain(text, suffix):
            return text + suffix

        for fn, want in ((Tool(), "object:z"), (functools.partial(plain, suffix="!"), "z!")):
            g = gated("tests.echo", target="echo:callable", client=c)(fn)
            self.assertTrue(inspect.iscoroutinefunction(g), fn)
            task = asyncio.create_task(g(text="z"))
            await approve(await c.next_submitted())
            self.assertEqual(await task, want)

    async def test_bound_to_an_async_client(self):
        ac = AsyncClient.from_client(client())

        @ac.gated("tests.echo", target="echo:bound")
        async def echo(text):
            return text

        task = asyncio.create_task(echo(text="bound"))
        await approve(await ac.sync.next_submitted())
        self.assertEqual(await task, "bound")

        # A synchronous function may be gated through an AsyncClient too.
        @gated("tests.echo", target="echo:bound", client=ac)
        def sync_echo(text):
            return text

        task = asyncio.create_task(asyncio.to_thread(sync_echo, text="sync"))
        await approve(await ac.sync.next_submitted())
        self.assertEqual(await task, "sync")


class AsyncClientLoop(Bounded):
    async def test_submit_wait_redeem_heartbeat_outcome(self):
        ac = AsyncClient(console.url, console.token("agent:py-async-client"))
        call = await ac.submit("tests.lease", "lease:async-client", {"n": 5}, rationale="the async client")
        self.assertTrue(call.created)
        self.assertEqual(ac.verify_digest(call), call.digest)
        waiting = asyncio.create_task(ac.wait(call.id))
        await asyncio.to_thread(console.wait_for_waiters, 1)
        await approve(call)
        call = await waiting
        self.assertEqual(call.status, "approved")
        r = await ac.redeem(call.grant, call)
        self.assertTrue(r.accepted, r.reason)
        lease = await ac.heartbeat(call.id)
        self.assertEqual(lease.extend_max, 2)
        done = await ac.report_outcome(call.id, "succeeded", "ran")
        self.assertEqual(done.outcome.status, "succeeded")
        self.assertEqual((await ac.get(call.id)).outcome.detail, "ran")
        with self.assertRaises(CountersignError) as cm:
            await ac.heartbeat(call.id)
        self.assertEqual(cm.exception.code, "outcome_already_reported")
        self.assertIn("keys", await ac.keys())

        pending = await ac.submit_json('{"tool":"tests.echo","target":"echo:withdrawn","args":{"text":"w"}}')
        self.assertEqual((await ac.cancel(pending.id)).status, "cancelled")
        with self.assertRaises(WaitTimeout):
            await ac.wait((await ac.submit("tests.echo", "echo:late", {"text": "l"})).id, timeout=1)

    async def test_a_cancelled_wait_stops_polling(self):
        ac = AsyncClient(console.url, console.token("agent:py-async-client-2"), poll_wait=1.0)
        call = await ac.submit("tests.echo", "echo:cancelled-wait", {"text": "c"})
        waiting = asyncio.create_task(ac.wait(call.id))
        await until("the wait to start", lambda: threads_of(call.id))
        waiting.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await waiting
        await until("the wait's thread to end", lambda: not threads_of(call.id))


if __name__ == "__main__":
    unittest.main()
