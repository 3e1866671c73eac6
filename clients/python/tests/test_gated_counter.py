"""The gated decorator meets a counter-proposal against a real console:
without accept_counter it is a NotApproved carrying the counter and what
changed, and nothing runs; with it the edited call is accepted, redeemed
and run; proposing exactly the counter's call accepts it."""

import asyncio
import unittest

from countersign import AsyncClient, NotApproved, gated

from .harness import Console, in_thread
from .test_client import CountingClient

console: Console


def setUpModule():
    global console
    console = Console()


def tearDownModule():
    console.stop()


class GatedCounter(unittest.TestCase):
    def refund(self, c, ran, **kw):
        @gated("payments.refund", target="invoice:INV-4300", client=c, heartbeat=False, **kw)
        def refund(amount_minor, currency, reason_code):
            ran.append(dict(amount_minor=amount_minor, currency=currency, reason_code=reason_code))
            return f"refunded {amount_minor}"
        return refund

    def test_not_opted_in(self):
        c = CountingClient(console.url, console.token("agent:py-counter-1"))
        ran = []
        refund = self.refund(c, ran)
        result = in_thread(refund, 40000, "USD", "duplicate")
        call = c.next_submitted()
        counter = console.counter(call.id, call.digest, amount_minor="4000")
        with self.assertRaises(NotApproved) as cm:
            result()
        e = cm.exception
        self.assertEqual((e.code, e.counter["id"], e.changes), ("countered", counter["id"],
                                                                ["amount_minor changed from 40000 to 4000"]))
        self.assertTrue(e.refusal)
        self.assertIn('"amount_minor":4000', e.message)
        self.assertEqual(ran, [])
        self.assertIsNone(c.get(counter["id"]).accepted_at, "accepted without the caller opting in")

        # Proposing exactly the counter's call accepts it, and it runs.
        self.assertEqual(refund(4000, "USD", "duplicate"), "refunded 4000")
        self.assertEqual(ran, [{"amount_minor": 4000, "currency": "USD", "reason_code": "duplicate"}])
        done = c.get(counter["id"])
        self.assertEqual((done.status, done.outcome.status), ("redeemed", "succeeded"))

    def test_accept_counter(self):
        c = CountingClient(console.url, console.token("agent:py-counter-2"))
        ran = []
        result = in_thread(self.refund(c, ran, accept_counter=True), 40000, "USD", "duplicate")
        call = c.next_submitted()
        counter = console.counter(call.id, call.digest, amount_minor="4000", reason_code='"requested"')
        self.assertEqual(result(), "refunded 4000")
        self.assertEqual(ran, [{"amount_minor": 4000, "currency": "USD", "reason_code": "requested"}])
        self.assertEqual(c.get(call.id).status, "countered")
        done = c.get(counter["id"])
        self.assertEqual((done.status, done.outcome.status, done.countered_from), ("redeemed", "succeeded", call.id))

    def test_accept_counter_after_previously_countered(self):
        c = CountingClient(console.url, console.token("agent:py-counter-4"))
        ran = []
        result = in_thread(self.refund(c, ran), 40000, "USD", "duplicate")
        call = c.next_submitted()
        counter = console.counter(call.id, call.digest, amount_minor="4000")
        with self.assertRaises(NotApproved):
            result()
        # Proposed again, the call is refused as previously_countered; opted
        # in, the counter it names runs.
        self.assertEqual(self.refund(c, ran, accept_counter=True)(40000, "USD", "duplicate"), "refunded 4000")
        self.assertEqual(ran, [{"amount_minor": 4000, "currency": "USD", "reason_code": "duplicate"}])
        self.assertEqual(c.get(counter["id"]).status, "redeemed")

    def test_accept_counter_async(self):
        c = CountingClient(console.url, console.token("agent:py-counter-3"))
        ran = []

        @gated("payments.refund", target="invoice:INV-4301", client=AsyncClient.from_client(c), heartbeat=False,
               accept_counter=True)
        async def refund(amount_minor, currency, reason_code):
            ran.append(amount_minor)
            return amount_minor

        result = in_thread(asyncio.run, refund(40000, "USD", "duplicate"))
        call = c.next_submitted()
        console.counter(call.id, call.digest, amount_minor="4000")
        self.assertEqual(result(), 4000)
        self.assertEqual(ran, [4000])


if __name__ == "__main__":
    unittest.main()
