"""Numbers with fractions at an MCP tool's number paths, live: the example
MCP server's tools mirrored by a real `console serve` (definitions trusted
at the first start), called through the console's MCP endpoint, /mcp/demo.
The digest this client computes, with the tool's number paths, is the
console's; the bytes that reach the upstream are this client's canonical
bytes, numbers in their ECMAScript form although Python wrote them
otherwise."""

import json
import time
import unittest
import urllib.error
import urllib.request

import countersign
from countersign import Client, DigestError

from .harness import Console, mcp_tools_file

console: Console
ACTOR = "agent:py-mcp"
PROTOCOL = "2025-11-25"


def setUpModule():
    global console
    console = Console(mcp_tools_file(), "--trust-first-definitions", "--hold", "1s")


def tearDownModule():
    console.stop()


class MCPSession:
    """The least of an MCP client over Streamable HTTP: a session, and
    requests whose JSON text the caller writes."""

    def __init__(self, url: str, token: str):
        self.url, self.token, self.session, self.next_id = url, token, "", 1
        result = self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                             "clientInfo": {"name": "countersign-python-tests", "version": "1"}})
        if result.get("protocolVersion") != PROTOCOL:
            raise AssertionError(f"initialize: {result}")
        self._post(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), want=None)

    def request(self, method: str, params: dict) -> dict:
        return self.request_text(method, json.dumps(params))

    def request_text(self, method: str, params: str) -> dict:
        """A request whose params are this JSON text, sent as it is."""
        rid = self.next_id
        self.next_id += 1
        msg = self._post('{"jsonrpc":"2.0","id":%d,"method":%s,"params":%s}' % (rid, json.dumps(method), params), want=rid)
        if "error" in msg:
            raise AssertionError(f"{method}: {msg['error']}")
        return msg["result"]

    def call_tool(self, name: str, arguments: str) -> dict:
        return self.request_text("tools/call", '{"name":%s,"arguments":%s}' % (json.dumps(name), arguments))

    def _post(self, body: str, want):
        req = urllib.request.Request(self.url, data=body.encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        req.add_header("Accept", "application/json, text/event-stream")
        req.add_header("Authorization", "Bearer " + self.token)
        if self.session:
            req.add_header("Mcp-Session-Id", self.session)
            req.add_header("Mcp-Protocol-Version", PROTOCOL)
        try:
            with urllib.request.urlopen(req, timeout=60) as res:
                self.session = res.headers.get("Mcp-Session-Id") or self.session
                kind = res.headers.get("Content-Type", "")
                data = res.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            raise AssertionError(f"POST {self.url}: {e.code} {e.read()[:500]!r}") from None
        if want is None:
            return None
        messages = [json.loads(data)] if kind.startswith("application/json") else [
            json.loads(line[len("data:"):]) for line in data.splitlines() if line.startswith("data:")]
        for m in messages:
            if m.get("id") == want:
                return m
        raise AssertionError(f"no answer to request {want} in {data[:500]!r}")


def structured(result: dict) -> dict:
    return result.get("structuredContent") or {}


def text(result: dict) -> str:
    return "".join(c.get("text", "") for c in result.get("content") or [])


class NumbersThroughTheGateway(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.token = console.token(ACTOR, audience="demo")
        cls.mcp = MCPSession(console.url + "/mcp/demo", cls.token)
        # The console lists the upstream's tools once it has connected.
        deadline = time.monotonic() + 60
        while True:
            names = {t["name"]: t for t in cls.mcp.request("tools/list", {})["tools"]}
            if "echo" in names and "exact bytes" in names["echo"].get("description", ""):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"the mirrored tools were never listed: {sorted(names)}")
            time.sleep(0.2)

    def pending(self, tool: str, args: str) -> dict:
        result = self.mcp.call_tool(tool, args)
        sc = structured(result)
        self.assertTrue(result.get("isError"), text(result))
        self.assertEqual(sc.get("status"), "approval_pending", text(result))
        return sc

    def test_the_local_digest_is_the_consoles(self):
        # Python writes 5e-07 and 1e-07; the console's canonical form (and
        # this client's) is ECMAScript's 5e-7 and 1e-7.
        args = {"customer": {"id": "c-1"},
                "lines": [{"sku": "ABC-1", "qty": 2, "price": 19.99}, {"sku": "XYZ-9", "qty": 1, "price": 5e-07},
                          {"sku": "TINY-1", "qty": 3, "price": 1e-07}, {"sku": "ZERO-0", "qty": 1, "price": 0.1}]}
        sent = json.dumps(args)
        self.assertIn("5e-07", sent)
        sc = self.pending("create_order", sent)
        paths = ["/args/lines/*/price"]
        env = countersign.envelope(ACTOR, "demo", "demo/create_order", "mcp:demo", args)
        self.assertEqual(countersign.digest_of(env, number_paths=paths), sc["digest"])
        self.assertIn(b'"price":5e-7', countersign.canonical_envelope(env, number_paths=paths))
        # Without the tool's number paths, the client refuses what the
        # console would refuse of a declared tool.
        with self.assertRaises(DigestError) as cm:
            countersign.digest_of(env)
        self.assertTrue(cm.exception.has_problem("float_not_allowed", "/args/lines/0/price"), cm.exception)

        # The call as the agent API returns it, to the same token, checks
        # against the same digest.
        call = Client(console.url, self.token).get(sc["call_id"])
        self.assertEqual((call.tool, call.target, call.digest), ("demo/create_order", "mcp:demo", sc["digest"]))
        self.assertEqual(call.args, args)
        self.assertEqual(Client(console.url, self.token).verify_digest(call, number_paths=paths), sc["digest"])

    def test_the_upstream_receives_the_canonical_bytes(self):
        args = {"x": 5e-07, "n": 9007199254740991, "s": "café", "tags": ["b", "a"]}
        sent = json.dumps(args, ensure_ascii=False)
        sc = self.pending("echo", sent)
        env = countersign.envelope(ACTOR, "demo", "demo/echo", "mcp:demo", args)
        self.assertEqual(countersign.digest_of(env, number_paths=["/args/x"]), sc["digest"])
        console.approve(sc["call_id"], sc["digest"])
        result = self.mcp.call_tool("echo", sent)
        self.assertFalse(result.get("isError"), text(result))
        want = countersign.canonical_bytes(args, number_paths=["/x"]).decode()
        self.assertEqual(want, '{"n":9007199254740991,"s":"café","tags":["b","a"],"x":5e-7}')
        self.assertEqual(text(result), want)

    def test_a_float_at_an_integer_path_is_refused_alike(self):
        result = self.mcp.call_tool("echo", '{"n":1.5,"x":1.5}')
        sc = structured(result)
        self.assertEqual(sc.get("status"), "invalid_arguments", text(result))
        self.assertEqual([(p["code"], p["path"]) for p in sc["problems"]], [("float_not_allowed", "/args/n")])
        env = countersign.envelope(ACTOR, "demo", "demo/echo", "mcp:demo", {"n": 1.5, "x": 1.5})
        with self.assertRaises(DigestError) as cm:
            countersign.digest_of(env, number_paths=["/args/x"])
        self.assertEqual([(p.code, p.path) for p in cm.exception.problems], [("float_not_allowed", "/args/n")])
