"""Counter-proposals as the client reads them: a countered call names its
counter, the counter names the call it answers, and previously_countered
names the counter to accept or decline."""

import json
import unittest

import countersign
from countersign import CountersignError
from countersign._client import Call


class CounterShapes(unittest.TestCase):
    def test_countered_call(self):
        counter = {"id": "call_b", "envelope": {"tool": "payments.refund"}, "digest": "d" * 64}
        c = Call.from_json({"id": "call_a", "status": "countered", "countered_by": counter})
        self.assertEqual(c.status, countersign.STATUS_COUNTERED)
        self.assertEqual(c.countered_by["id"], "call_b")
        self.assertTrue(c.decided)
        k = Call.from_json({"id": "call_b", "status": "pending", "countered_from": "call_a"})
        self.assertEqual((k.countered_from, k.countered_by), ("call_a", None))

    def test_previously_countered(self):
        body = json.dumps({"error": {"code": "previously_countered", "message": "x", "call_id": "call_a",
                                     "countered_by": "call_b"}}).encode()
        e = CountersignError.from_response(409, body)
        self.assertEqual((e.code, e.call_id, e.countered_by), ("previously_countered", "call_a", "call_b"))


if __name__ == "__main__":
    unittest.main()
