"""An approval given through a delegation names whom it was for."""

import unittest

from countersign import Approval, Step


class DelegationTest(unittest.TestCase):
    def test_approval_and_lineage_step_read_for(self):
        a = Approval.from_json({"by": "bob", "channel": "web", "method": "click", "human": "true",
                                "digest": "ab" * 32, "at": "2030-01-02T03:04:05Z", "for": "alice"})
        self.assertEqual(a.by, "bob")
        self.assertEqual(a.for_, "alice")
        s = Step.from_json({"by": "bob", "at": "2030-01-02T03:04:05Z", "verdict": "approved", "for": "alice"})
        self.assertEqual(s.for_, "alice")

    def test_own_standing_has_no_for(self):
        a = Approval.from_json({"by": "bob", "channel": "web", "method": "click", "at": "2030-01-02T03:04:05Z"})
        self.assertEqual(a.for_, "")


if __name__ == "__main__":
    unittest.main()
