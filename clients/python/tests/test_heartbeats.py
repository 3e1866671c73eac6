"""Heartbeats on their own, with a stand-in for the client: a heartbeat
that fails for a while is tried again at the next beat, and one the console
says can never succeed stops them (no console is needed for either)."""

import asyncio
import threading
import unittest

from countersign import CountersignError
from countersign._gated import AsyncHeartbeats, Heartbeats


class FlakyClient:
    """Fails the first heartbeats with ``errors`` in turn, then accepts."""

    def __init__(self, errors):
        self.errors = list(errors)
        self.calls = 0
        self.lock = threading.Lock()
        self.sync = self

    def heartbeat(self, call_id, extend=None):
        with self.lock:
            self.calls += 1
            if self.errors:
                raise self.errors.pop(0)


def wait_until(cond, timeout=10.0):
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        while not cond():
            if deadline.wait(0.005):
                raise AssertionError("timed out")
    finally:
        timer.cancel()


class HeartbeatsTest(unittest.TestCase):
    def test_failures_are_tried_again(self):
        c = FlakyClient([OSError("connection refused"), CountersignError("unavailable", "try later", status=503)])
        h = Heartbeats(c, "call_x", every=0.01, limit=30)
        try:
            wait_until(lambda: h.sent >= 2)
        finally:
            h.stop()
        self.assertGreaterEqual(c.calls, 4)

    def test_a_final_answer_stops_them(self):
        c = FlakyClient([CountersignError("lease_expired", "the lease ended", status=409)])
        h = Heartbeats(c, "call_x", every=0.01, limit=30)
        wait_until(lambda: not h.running())
        self.assertEqual((c.calls, h.sent), (1, 0))


class AsyncHeartbeatsTest(unittest.IsolatedAsyncioTestCase):
    async def test_failures_are_tried_again(self):
        c = FlakyClient([OSError("connection refused"), CountersignError("unavailable", "try later", status=503)])
        h = AsyncHeartbeats(c, "call_x", every=0.01, limit=30)
        try:
            while h.sent < 2:
                await asyncio.sleep(0.005)
        finally:
            await h.stop()
        self.assertGreaterEqual(c.calls, 4)

    async def test_a_final_answer_stops_them(self):
        c = FlakyClient([CountersignError("not_lease_holder", "another token redeemed it", status=409)])
        h = AsyncHeartbeats(c, "call_x", every=0.01, limit=30)
        while h.running():
            await asyncio.sleep(0.005)
        self.assertEqual((c.calls, h.sent), (1, 0))


if __name__ == "__main__":
    unittest.main()
