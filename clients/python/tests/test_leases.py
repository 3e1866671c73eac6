"""The execution lease against a real `console serve` on 127.0.0.1: what an
accepted redemption carries (the hashed envelope, the lease), heartbeats
and who may send them, an expired lease and a person's resolution, and the
gated decorator's heartbeats while the function runs."""

import hashlib
import threading
import time
import unittest
from datetime import datetime, timedelta, timezone

import countersign
from countersign import Client, CountersignError, gated

from .harness import OPERATOR, Console

console: Console


def setUpModule():
    global console
    console = Console()


def tearDownModule():
    console.stop()


_n = 0


def new_client(actor: str = "") -> Client:
    global _n
    _n += 1
    return Client(console.url, console.token(actor or f"agent:py-lease-{_n}"))


def now() -> datetime:
    return datetime.now(timezone.utc)


def redeemed(c: Client, n: int):
    """A call of tests.lease (outcome_within 2 s), approved and redeemed."""
    call = c.submit("tests.lease", f"lease:n-{n}", {"n": n})
    console.approve(call.id, call.digest)
    call = c.wait(call.id)
    r = c.redeem(call.grant, call)
    if not r.accepted:
        raise AssertionError(f"redemption refused: {r.reason}")
    return call, r


def until(what: str, cond, limit: float = 20.0):
    """Poll cond until it returns something true (the console's lease loop
    acts on its own clock)."""
    deadline = time.monotonic() + limit
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Redemption(unittest.TestCase):
    def test_the_envelope_and_the_lease(self):
        c = new_client()
        before = now()
        call, r = redeemed(c, 1)
        # The exact bytes that were hashed: this client's canonical
        # envelope of the call, and their digest is the call's.
        self.assertEqual(r.envelope, countersign.canonical_envelope(call.envelope()).decode())
        self.assertEqual(hashlib.sha256(countersign.DIGEST_PREFIX + r.envelope.encode()).hexdigest(), call.digest)
        self.assertEqual(r.digest, call.digest)
        self.assertEqual(r.outcome_within, 2)
        self.assertTrue(before < r.lease_until <= now() + timedelta(seconds=2), r.lease_until)
        got = c.get(call.id)
        self.assertEqual((got.status, got.lease_until), ("redeemed", r.lease_until))
        self.assertIsNotNone(got.redeemed_at)
        self.assertIsNone(got.outcome)


class Heartbeat(unittest.TestCase):
    def test_extends_the_lease_for_its_token_only(self):
        c = new_client("agent:py-beats")
        call, r = redeemed(c, 2)
        lease = c.heartbeat(call.id)
        self.assertEqual((lease.call_id, lease.extend_max), (call.id, 2))
        self.assertGreaterEqual(lease.lease_until, r.lease_until)
        # A shorter extension never shortens the lease.
        self.assertGreaterEqual(c.heartbeat(call.id, extend=1).lease_until, lease.lease_until)
        with self.assertRaises(CountersignError) as cm:
            c.heartbeat(call.id, extend=3)
        self.assertEqual((cm.exception.code, cm.exception.status), ("invalid_arguments", 422))
        self.assertTrue(cm.exception.has_problem("out_of_range", "/extend_seconds"))
        with self.assertRaises(CountersignError) as cm:
            c.heartbeat(call.id, extend=0.5)
        self.assertEqual(cm.exception.code, "out_of_range")
        # Another token, even of the same actor, is told the call does not exist.
        other = Client(console.url, console.token("agent:py-beats"))
        with self.assertRaises(CountersignError) as cm:
            other.heartbeat(call.id)
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_found", 404))
        c.report_outcome(call.id, "succeeded")
        with self.assertRaises(CountersignError) as cm:
            c.heartbeat(call.id)
        self.assertEqual((cm.exception.code, cm.exception.status), ("outcome_already_reported", 409))

    def test_before_redemption(self):
        c = new_client()
        call = c.submit("tests.lease", "lease:early", {"n": 3})
        with self.assertRaises(CountersignError) as cm:
            c.heartbeat(call.id)
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_redeemed", 409))


class ExpiredLease(unittest.TestCase):
    def test_lease_expired_then_resolved_by_a_person(self):
        c = new_client()
        call, r = redeemed(c, 4)
        got = until("the lease to expire", lambda: (g := c.get(call.id)).outcome and g)
        self.assertEqual(got.outcome.status, countersign.OUTCOME_LEASE_EXPIRED)
        self.assertIsNotNone(got.outcome.at)
        self.assertIsNone(got.resolution)
        with self.assertRaises(CountersignError) as cm:
            c.heartbeat(call.id)
        self.assertEqual((cm.exception.code, cm.exception.status), ("lease_expired", 409))

        console.resolve(call.id, countersign.VERDICT_NOT_EXECUTED, "the ledger shows no such entry",
                        "https://ledger.example.com/search?q=n-4")
        got = c.get(call.id)
        res = got.resolution
        self.assertEqual((res.verdict, res.by, res.note, res.evidence),
                         ("not_executed", OPERATOR, "the ledger shows no such entry", "https://ledger.example.com/search?q=n-4"))
        self.assertIsNotNone(res.at)
        # A late report is still accepted, and both stay on record.
        late = c.report_outcome(call.id, "failed", "it never started")
        self.assertEqual((late.outcome.status, late.resolution.verdict), ("failed", "not_executed"))


def heartbeat_threads() -> list:
    return [t for t in threading.enumerate() if t.name.startswith("countersign-heartbeat-")]


class CountingClient(Client):
    """Counts the heartbeats its gated functions send, and remembers the
    calls they propose."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.beats = 0
        self.calls: list = []

    def heartbeat(self, call_id, extend=None):
        lease = super().heartbeat(call_id, extend)
        self.beats += 1
        return lease

    def submit(self, *a, **kw):
        call = super().submit(*a, **kw)
        self.calls.append(call)
        console.approve(call.id, call.digest)
        return call


class GatedHeartbeats(unittest.TestCase):
    def test_the_lease_lives_while_the_function_runs(self):
        c = CountingClient(console.url, console.token("agent:py-gated-lease"))
        seen = {}

        @gated("tests.lease", target="lease:long", client=c)
        def long_job(n):
            call = c.calls[-1]
            first = c.get(call.id).lease_until
            # Run past the end of the first lease (2 s): heartbeats keep it.
            until("the first lease's end to pass", lambda: now() > first + timedelta(seconds=1.5))
            got = c.get(call.id)
            seen.update(outcome=got.outcome, lease_until=got.lease_until, first=first, at=now())
            return n * 2

        self.assertEqual(long_job(n=21), 42)
        self.assertIsNone(seen["outcome"], "the lease expired while the function ran")
        self.assertGreater(seen["lease_until"], seen["at"])
        self.assertGreater(seen["lease_until"], seen["first"])
        self.assertGreaterEqual(c.beats, 2)
        # Stopped on return: no heartbeat thread is left, and the outcome
        # is the function's.
        self.assertEqual(heartbeat_threads(), [])
        beats = c.beats
        done = c.get(c.calls[-1].id)
        self.assertEqual((done.status, done.outcome.status), ("redeemed", "succeeded"))
        self.assertEqual(c.beats, beats)

        # A function that raises stops them too.
        @gated("tests.lease", target="lease:fails", client=c, heartbeat_every=0.2)
        def failing(n):
            until("a heartbeat", lambda: c.beats > beats)
            raise ValueError("no")

        with self.assertRaises(ValueError):
            failing(n=1)
        self.assertEqual(heartbeat_threads(), [])
        self.assertEqual(c.get(c.calls[-1].id).outcome.status, "failed")

    def test_heartbeats_are_bounded(self):
        c = CountingClient(console.url, console.token("agent:py-gated-bounded"))

        @gated("tests.lease", target="lease:stuck", client=c, heartbeat_every=0.3, max_heartbeat=1.0)
        def stuck(n):
            # Heartbeats stop after a second: the lease then ends, and the
            # console records that nobody reported.
            got = until("the lease to expire", lambda: (g := c.get(c.calls[-1].id)).outcome and g)
            return got.outcome.status

        self.assertEqual(stuck(n=7), countersign.OUTCOME_LEASE_EXPIRED)
        self.assertLessEqual(c.beats, 3)
        self.assertEqual(heartbeat_threads(), [])
        # The function's own report, late, replaces lease_expired.
        self.assertEqual(c.get(c.calls[-1].id).outcome.status, "succeeded")

    def test_without_heartbeats(self):
        c = CountingClient(console.url, console.token("agent:py-gated-none"))

        @gated("tests.lease", target="lease:none", client=c, heartbeat=False)
        def quick(n):
            self.assertEqual(heartbeat_threads(), [])
            return n

        self.assertEqual(quick(n=1), 1)
        self.assertEqual(c.beats, 0)
