"""Scope digests agree with the console's vectors in clients/testdata/scopes.txt."""

import json
import os
import unittest

from countersign import DigestError, scope_digest

from .harness import TESTDATA


def vectors():
    with open(os.path.join(TESTDATA, "scopes.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.startswith("-- "):
            name, digest = line[3:-3].split(" digest=")
            out.append((name, json.loads(lines[i + 1]), digest))
    return out


class ScopeDigestTest(unittest.TestCase):
    def test_vectors(self):
        vs = vectors()
        self.assertGreaterEqual(len(vs), 6)
        for name, scope, digest in vs:
            with self.subTest(name):
                self.assertEqual(scope_digest(scope), digest)
                # Member order does not matter; the canonical form sorts.
                self.assertEqual(scope_digest(dict(reversed(list(scope.items())))), digest)

    def test_refusals(self):
        _, scope, _ = vectors()[0]
        with self.assertRaises(DigestError):
            scope_digest({**scope, "uses": 1.5})
        with self.assertRaises(DigestError):
            scope_digest({**scope, "uses": 2**53})
        with self.assertRaises(TypeError):
            scope_digest([scope])


if __name__ == "__main__":
    unittest.main()
