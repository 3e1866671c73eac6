"""Plans through the client against a real console: submit, a person's
approval on the plan's page, then mint, redeem and report item by item."""

import asyncio
import threading
import time
import unittest

import countersign
from countersign import CountersignError

from .harness import Console


def steps(n: int) -> list:
    return [{"tool": "tests.plan", "target": f"step:s{i}", "args": {"n": i}} for i in range(n)]


class PlanHelper(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.console = Console()

    @classmethod
    def tearDownClass(cls):
        cls.console.stop()

    def approve_when_submitted(self, client: countersign.Client) -> threading.Thread:
        """A person approves the next plan the agent submits, on its page."""
        def approve() -> None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                page = self.console._browse("/")
                i = page.find('data-testid="plan-card" data-plan="')
                if i >= 0:
                    pid = page[i:].split('data-plan="', 1)[1].split('"', 1)[0]
                    self.console.approve_plan(pid)
                    return
                time.sleep(0.05)
        t = threading.Thread(target=approve, daemon=True)
        t.start()
        return t

    def test_wait_plan_long_polls(self):
        """wait_plan holds a read open and returns as soon as a person
        approves, not at its next interval."""
        c = countersign.Client(self.console.url, self.console.token("agent:waiter"))
        approver = self.approve_when_submitted(c)
        p = c.submit_plan(steps(1), "one step")
        start = time.monotonic()
        p = c.wait_plan(p.id, timeout=20, interval=3600)
        approver.join()
        self.assertEqual(p.status, "approved")
        self.assertLess(time.monotonic() - start, 20)

    def test_plan_runs_item_by_item(self):
        c = countersign.Client(self.console.url, self.console.token("agent:stepper"))
        approver = self.approve_when_submitted(c)
        ran = []
        p = c.plan(steps(3), "three steps", lambda item: ran.append(item.target), ordered=True, interval=0.05, timeout=30)
        approver.join(5)
        self.assertEqual(ran, ["step:s0", "step:s1", "step:s2"])
        self.assertEqual(p.status, "approved")
        for item in p.items:
            self.assertEqual(item.status, countersign.STATUS_REDEEMED)
            self.assertEqual(item.plan["id"], p.id)
            self.assertEqual(item.approvals.given[0].method, "plan")
            self.assertEqual(item.approvals.given[0].human, "true")

    def test_failed_item_halts_the_plan(self):
        c = countersign.Client(self.console.url, self.console.token("agent:halter"))
        approver = self.approve_when_submitted(c)
        ran = []

        def run(item):
            ran.append(item.target)
            return "failed" if len(ran) == 2 else None

        with self.assertRaises(CountersignError) as e:
            c.plan(steps(3), "three steps", run, ordered=True, interval=0.05, timeout=30)
        approver.join(5)
        self.assertEqual(e.exception.code, "plan_halted")
        self.assertEqual(ran, ["step:s0", "step:s1"])
        halted = e.exception.plan
        self.assertEqual(halted.status, "halted")
        pid = halted.id
        with self.assertRaises(CountersignError) as e2:
            c.mint_item(pid, 2)
        self.assertEqual(e2.exception.code, "plan_halted")
        self.assertEqual(c.cancel_plan(pid).status, "cancelled")

    def test_async_client_reads_and_cancels_plans(self):
        c = countersign.AsyncClient(self.console.url, self.console.token("agent:async-planner"))

        async def flow():
            p = await c.submit_plan(steps(2), "two steps")
            got = await c.get_plan(p.id)
            with self.assertRaises(CountersignError) as e:
                await c.mint_item(p.id, 0)
            cancelled = await c.cancel_plan(p.id)
            return p, got, e.exception, cancelled

        p, got, err, cancelled = asyncio.run(flow())
        self.assertEqual((got.id, got.status, len(got.items)), (p.id, "pending", 2))
        self.assertEqual(err.code, "plan_not_approved")
        self.assertEqual(cancelled.status, "cancelled")

    def test_invalid_plan_lists_every_problem(self):
        c = countersign.Client(self.console.url, self.console.token("agent:sloppy"))
        with self.assertRaises(CountersignError) as e:
            c.submit_plan([{"tool": "tests.plan", "target": "step:a", "args": {"n": "x"}},
                           {"tool": "tests.echo", "target": "echo:a", "args": {"text": "a"}}], "bad")
        self.assertEqual(e.exception.code, "invalid_arguments")
        self.assertEqual([p.path for p in e.exception.problems], ["/items/0/args/n", "/items/1/tool"])


if __name__ == "__main__":
    unittest.main()
