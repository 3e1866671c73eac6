"""The canonical form and digest, offline: ECMAScript number text, what is
refused and how, UTF-16 member order, escapes."""

import json
import math
import os
import re
import struct
import unittest
from decimal import Decimal

import countersign
from countersign import DigestError, canonical_bytes, digest_of, envelope, format_number, without

from .harness import REPO, TESTDATA


def refused(test: unittest.TestCase, fn, *args, **kwargs) -> DigestError:
    with test.assertRaises(DigestError) as cm:
        fn(*args, **kwargs)
    return cm.exception


class ECMAScriptNumbers(unittest.TestCase):
    def test_vectors_made_by_node(self):
        # ecmascript-numbers.txt holds String(x) from Node for 7,500 doubles.
        n = 0
        with open(os.path.join(TESTDATA, "ecmascript-numbers.txt")) as f:
            for line in f:
                if line.startswith("#"):
                    continue
                bits, want = line.split()
                x = struct.unpack(">d", bytes.fromhex(bits))[0]
                self.assertEqual(format_number(x), want, f"bits {bits} ({x!r})")
                n += 1
        self.assertGreater(n, 7000, "the vector file shrank")

    def test_where_python_repr_differs(self):
        cases = {5e-7: "5e-7", 1e-7: "1e-7", 2.5e-7: "2.5e-7", 1e16: "10000000000000000",
                 1e20: "100000000000000000000", 123e18: "123000000000000000000", 100.0: "100", -0.0: "0",
                 0.000001: "0.000001", 1e-5: "0.00001"}
        for x, want in cases.items():
            with self.subTest(x=repr(x)):
                self.assertNotEqual(repr(x), want, "a case where repr agrees tests nothing")
                self.assertEqual(format_number(x), want)
        # From 1e21 on both write an exponent with its sign, and below 1e-6
        # ECMAScript drops the exponent's leading zero only.
        for x, want in {1e21: "1e+21", 1.5e300: "1.5e+300", 1.5e-10: "1.5e-10", 0.1: "0.1"}.items():
            self.assertEqual((repr(x), format_number(x)), (want, want))

    def test_not_a_number(self):
        for x in (math.nan, math.inf, -math.inf):
            with self.assertRaises(ValueError):
                format_number(x)


class NumberPaths(unittest.TestCase):
    def env(self, args):
        return envelope("agent:a", "mcp-host", "weather/forecast", "mcp:weather/forecast", args)

    def test_floats_only_where_named(self):
        args = {"lat": 52.52, "lon": 13.4, "days": 3, "scale": 2.5e-7}
        paths = ["/args/lat", "/args/lon", "/args/scale"]
        b = countersign.canonical_envelope(self.env(args), number_paths=paths)
        self.assertIn(b'"args":{"days":3,"lat":52.52,"lon":13.4,"scale":2.5e-7}', b)
        e = refused(self, digest_of, self.env(args), number_paths=["/args/lat", "/args/lon"])
        self.assertEqual((e.code, [(p.code, p.path) for p in e.problems]), ("float_not_allowed", [("float_not_allowed", "/args/scale")]))
        e = refused(self, digest_of, self.env(args))
        self.assertEqual(e.code, "invalid_arguments")
        self.assertEqual({p.path for p in e.problems}, {"/args/lat", "/args/lon", "/args/scale"})

    def test_integral_floats(self):
        # 1.0 at a number path is the number 1; an integral value must still
        # be an integer every runtime holds exactly.
        b = canonical_bytes({"t": 1.0, "u": -0.0, "v": 9007199254740991.0}, number_paths=["/t", "/u", "/v"])
        self.assertEqual(b, b'{"t":1,"u":0,"v":9007199254740991}')
        for x in (1e16, 9007199254740992.0, -1e300, 1e21):
            e = refused(self, canonical_bytes, {"t": x}, number_paths=["/t"])
            self.assertEqual((e.code, e.problems[0].path), ("out_of_range", "/t"), repr(x))

    def test_wildcards_and_predicates(self):
        v = {"points": [{"x": 0.5, "y": 1.25}, {"x": 1e-7, "y": 2}], "x": 1.5}
        b = canonical_bytes(v, number_paths=["/points/*/x", "/points/*/y", "/x"])
        self.assertEqual(b, b'{"points":[{"x":0.5,"y":1.25},{"x":1e-7,"y":2}],"x":1.5}')
        self.assertEqual(canonical_bytes(v, number_paths=lambda p: p.endswith(("/x", "/y"))), b)
        e = refused(self, canonical_bytes, v, number_paths=["/points/*/y", "/x"])
        self.assertEqual([p.path for p in e.problems], ["/points/0/x", "/points/1/x"])
        # As in a schema, an array's items are all alike: an index names nothing.
        e = refused(self, canonical_bytes, v, number_paths=["/points/0/x", "/points/*/y", "/x"])
        self.assertEqual([p.path for p in e.problems], ["/points/0/x", "/points/1/x"])
        with self.assertRaises(TypeError):
            canonical_bytes(v, number_paths="/x")
        # * is every item of an array, never any member of an object.
        e = refused(self, canonical_bytes, {"o": {"x": 0.5}}, number_paths=["/*/x"])
        self.assertEqual([p.path for p in e.problems], ["/o/x"])

    def test_nan_is_refused_everywhere(self):
        for x in (math.nan, math.inf):
            e = refused(self, canonical_bytes, {"t": x}, number_paths=["/t"])
            self.assertEqual((e.code, e.problems[0].path), ("malformed_json", "/t"))


class Refusals(unittest.TestCase):
    """What Python can hold and JSON text cannot say the same way."""

    def test_python_values(self):
        cases = [
            ({"a": 100.0}, "float_not_allowed", "/args/a"),  # what json.loads makes of 1e2 or 100.0
            ({"a": 2**63}, "out_of_range", "/args/a"),
            ({"a": -(2**53)}, "out_of_range", "/args/a"),
            ({"a": Decimal("12.99")}, "wrong_type", "/args/a"),
            ({"a": {1: "x"}}, "wrong_type", "/args/a"),
            ({"a": b"bytes"}, "wrong_type", "/args/a"),
            ({"a": ["x", "\udfff"]}, "invalid_utf8", "/args/a/1"),
            ({"\ud83d": 1}, "invalid_utf8", "/args"),
        ]
        for args, code, path in cases:
            with self.subTest(args=repr(args)):
                e = refused(self, digest_of, envelope("agent:a", "h", "a.b", "t", args))
                self.assertEqual([(p.code, p.path) for p in e.problems], [(code, path)])
                self.assertIsNone(e.status, "nothing was sent")

    def test_booleans_are_not_integers(self):
        self.assertEqual(canonical_bytes([True, False, None, 1, 0]), b"[true,false,null,1,0]")

    def test_every_problem_is_listed(self):
        env = {"v": 2, "actor": "agent:a", "audience": "h", "tool": "Bad", "target": "  ",
               "args": {"f": 0.5, "s": "\ud800"}, "rationale": "not hashed"}
        e = refused(self, digest_of, env)
        self.assertEqual(e.code, "invalid_arguments")
        self.assertEqual(sorted((p.code, p.path) for p in e.problems), [
            ("empty_string", "/target"), ("float_not_allowed", "/args/f"), ("invalid_tool", "/tool"),
            ("invalid_utf8", "/args/s"), ("unknown_field", "/rationale"), ("wrong_type", "/v")])
        shape = e.to_dict()
        self.assertEqual(set(shape["error"]), {"code", "message", "problems"})
        self.assertEqual(json.loads(e.to_json()), shape)
        self.assertTrue(e.has_problem("invalid_tool", "/tool") and not e.has_problem("invalid_tool", "/target"))

    def test_missing_members(self):
        e = refused(self, digest_of, {"v": 1, "actor": "a"})
        self.assertEqual(sorted(p.path for p in e.problems), ["/args", "/audience", "/target", "/tool"])
        self.assertTrue(all(p.code == "missing_field" for p in e.problems))
        e = refused(self, digest_of, [])
        self.assertEqual((e.problems[0].code, e.problems[0].path), ("wrong_type", ""))

    def test_depth(self):
        def nest(n):
            v = {}
            for _ in range(n - 1):
                v = {"a": v}
            return v
        digest_of(envelope("a", "b", "a.b", "t", nest(32)))
        e = refused(self, digest_of, envelope("a", "b", "a.b", "t", nest(33)))
        self.assertEqual((e.code, e.problems[0].path), ("too_deep", "/args" + "/a" * 32))
        def lists(n):
            v = []
            for _ in range(n - 1):
                v = [v]
            return v
        digest_of(envelope("a", "b", "a.b", "t", {"l": lists(31)}))
        e = refused(self, digest_of, envelope("a", "b", "a.b", "t", {"l": lists(32)}))
        self.assertEqual((e.code, e.problems[0].path), ("too_deep", "/args/l" + "/0" * 31))

    def test_tool_names(self):
        for ok in ("payments.refund", "a", "a1_b.c2", "weather/get_forecast", "srv-1/Tool.Name-2"):
            self.assertTrue(countersign.valid_tool_name(ok), ok)
        for bad in ("", "A.b", "a..b", "a.", ".a", "1a", "a-b", "a/", "/a", "A/b", "a/b/c", "a" * 129, "a/" + "b" * 129):
            self.assertFalse(countersign.valid_tool_name(bad), bad)


class CanonicalText(unittest.TestCase):
    def test_utf16_member_order(self):
        # 😀 is D83D DE00 in UTF-16 and sorts before ｡ U+FF61; by code point
        # (Python's sort_keys) it would sort after.
        v = {"｡": 2, "😀": 1, "a": 0, "é": 3}
        self.assertEqual(canonical_bytes(v).decode(), '{"a":0,"é":3,"😀":1,"｡":2}')
        self.assertNotEqual(json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
                            canonical_bytes(v).decode())

    def test_string_escapes(self):
        s = "\"\\/\b\f\n\r\t\x00\x1f\x7f\u2028<>&é😀"
        self.assertEqual(canonical_bytes(s).decode(), '"\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\x7f\u2028<>&é😀"')

    def test_doc_worked_example(self):
        # docs/canonical.md §5: the proposal block, hashed, gives the digest
        # block and the canonical block.
        with open(os.path.join(REPO, "docs", "canonical.md"), encoding="utf-8") as f:
            doc = f.read()

        def block(name):
            return re.search(r"<!-- example:%s -->\n```[a-z]*\n(.*?)```" % name, doc, re.S).group(1)

        ctx = dict(line.split(":", 1) for line in block("context").strip().splitlines())
        p = json.loads(block("proposal"))
        env = envelope(ctx["actor"].strip(), ctx["audience"].strip(), p["tool"], p["target"], p["args"])
        self.assertEqual(countersign.canonical_envelope(env).decode(), block("canonical").strip())
        self.assertEqual(digest_of(env), block("digest").strip())

    def test_without(self):
        args = {"notes": "x", "a": {"b": 1, "c": 2}, "l": [{"b": 1}]}
        self.assertEqual(without(args, ["/notes", "/a/b", "/l/0/b", "/missing/x"]),
                         {"a": {"c": 2}, "l": [{"b": 1}]})
        self.assertEqual(args["notes"], "x", "the original is left alone")
        self.assertEqual(without({"a/b": 1, "~": 2}, ["/a~1b", "/~0"]), {})


if __name__ == "__main__":
    unittest.main()
