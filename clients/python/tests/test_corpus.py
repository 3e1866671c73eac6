"""Digest agreement with the console on the corpora in clients/testdata:
every body of equivalence.txt gets the console's digest (`console digest`,
the server's own canonical code), and every body of refusals.txt is refused
here with the console's code at the console's pointer."""

import json
import re
import unittest

from countersign import DigestError, digest_of

from .harness import console_digest, read_sections

HEADER = re.compile(r"(same|differ)/([a-z0-9-]+)/(a|b)((?: (?:actor|audience)=\S+)*)$")


def envelope_of(body: str, actor: str, audience: str) -> dict:
    p = json.loads(body)
    env = {"v": 1, "actor": actor, "audience": audience}
    for k in ("tool", "target", "args"):
        if k in p:
            env[k] = p[k]
    return env


class Equivalence(unittest.TestCase):
    def test_corpus(self):
        pairs: dict[str, dict] = {}
        for header, body in read_sections("equivalence.txt"):
            m = HEADER.match(header)
            self.assertIsNotNone(m, header)
            ctx = {"actor": "agent:billing-bot", "audience": "payments-host"}
            for kv in m.group(4).split():
                k, v = kv.split("=", 1)
                ctx[k] = v
            with self.subTest(header):
                code, out = console_digest(body, ctx["actor"], ctx["audience"])
                self.assertEqual(code, 0, out)
                want = out.strip()
                got = digest_of(envelope_of(body, ctx["actor"], ctx["audience"]))
                self.assertEqual(got, want, f"digest of {body!r}")
            pairs.setdefault(m.group(1) + "/" + m.group(2), {})[m.group(3)] = want
        kinds = {"same": 0, "differ": 0}
        for name, sides in pairs.items():
            kind = name.split("/")[0]
            kinds[kind] += 1
            self.assertEqual(set(sides), {"a", "b"}, name)
            if kind == "same":
                self.assertEqual(sides["a"], sides["b"], name)
            else:
                self.assertNotEqual(sides["a"], sides["b"], name)
        self.assertGreaterEqual(kinds["same"], 27, "the corpus shrank")
        self.assertGreaterEqual(kinds["differ"], 38, "the corpus shrank")


class Refusals(unittest.TestCase):
    def test_corpus(self):
        n = 0
        for header, body in read_sections("refusals.txt"):
            code, path = header.split(" ")
            with self.subTest(header):
                exit_code, out = console_digest(body, "agent:billing-bot", "payments-host")
                self.assertEqual(exit_code, 2, out)
                server = json.loads(out)["error"]["problems"]
                self.assertEqual([(p["code"], p["path"]) for p in server], [(code, path)], "the console's answer")
                with self.assertRaises(DigestError) as cm:
                    digest_of(envelope_of(body, "agent:billing-bot", "payments-host"))
                self.assertEqual([(p.code, p.path) for p in cm.exception.problems], [(code, path)])
            n += 1
        self.assertGreaterEqual(n, 27, "the corpus shrank")


NUMBERS_HEADER = re.compile(r"([a-z0-9-]+) numbers=(\S+) (digest|refused)=(\S+)$")


class Numbers(unittest.TestCase):
    """numbers.txt: the console's digests and refusals for a tool whose
    schema declares numbers (checked against the console by the Go test
    TestNumberCorpus)."""

    def test_corpus(self):
        n = 0
        for header, body in read_sections("numbers.txt"):
            m = NUMBERS_HEADER.match(header)
            self.assertIsNotNone(m, header)
            name, paths, kind, want = m.groups()
            with self.subTest(name):
                env = envelope_of(body, "agent:mcp-bot", "mcp-gateway")
                if kind == "digest":
                    self.assertEqual(digest_of(env, number_paths=paths.split(",")), want)
                    with self.assertRaises(DigestError, msg="without number paths"):
                        digest_of(env)
                else:
                    with self.assertRaises(DigestError) as cm:
                        digest_of(env, number_paths=paths.split(","))
                    self.assertEqual([f"{p.code}:{p.path}" for p in cm.exception.problems], [want])
            n += 1
        self.assertGreaterEqual(n, 14, "the corpus shrank")


if __name__ == "__main__":
    unittest.main()
