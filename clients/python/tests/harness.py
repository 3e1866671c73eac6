"""A real `console serve` on 127.0.0.1 for the tests, driven through the
console's own command line (tokens, operators, decisions).

The binary is $COUNTERSIGN_CONSOLE, or one built here with `go build` from
this repository. Without either the tests are skipped, except under CI=true,
where they fail.
"""

from __future__ import annotations

import atexit
import http.cookiejar
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request
from typing import Iterable

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENTS = os.path.normpath(os.path.join(HERE, "..", ".."))
REPO = os.path.dirname(CLIENTS)
TESTDATA = os.path.join(CLIENTS, "testdata")
TOOLS = os.path.join(TESTDATA, "tools.yaml")
OPERATOR = "olivia"
OPERATOR_PASSWORD = "pw-olivia-correct horse battery staple"

_binary: str | None = None


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"{what}; under CI=true this is a failure, not a skip")
    raise unittest.SkipTest(what)


def console_binary() -> str:
    """The console binary, built once per process when not given."""
    global _binary
    if _binary:
        return _binary
    path = os.environ.get("COUNTERSIGN_CONSOLE")
    if path:
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"COUNTERSIGN_CONSOLE={path} is not an executable")
        _binary = path
        return path
    go = shutil.which("go")
    if go is None or not os.path.exists(os.path.join(REPO, "go.mod")):
        _missing("no console binary: set COUNTERSIGN_CONSOLE or install Go")
    out = tempfile.mkdtemp(prefix="countersign-py-")
    atexit.register(shutil.rmtree, out, True)
    target = os.path.join(out, "console")
    subprocess.run([go, "build", "-o", target, "./cmd/console"], cwd=REPO, check=True)
    _binary = target
    return target


_mcp_demo: str | None = None


def mcp_demo_binary() -> str:
    """The example MCP server (examples/mcpdemo/cmd/mcp-demo):
    $COUNTERSIGN_MCP_DEMO, or one built here with `go build` from this
    repository."""
    global _mcp_demo
    if _mcp_demo:
        return _mcp_demo
    path = os.environ.get("COUNTERSIGN_MCP_DEMO")
    if path:
        if not os.access(path, os.X_OK):
            raise RuntimeError(f"COUNTERSIGN_MCP_DEMO={path} is not an executable")
        _mcp_demo = path
        return path
    go = shutil.which("go")
    if go is None or not os.path.exists(os.path.join(REPO, "go.mod")):
        _missing("no example MCP server: set COUNTERSIGN_MCP_DEMO or install Go")
    out = tempfile.mkdtemp(prefix="countersign-py-mcp-")
    atexit.register(shutil.rmtree, out, True)
    target = os.path.join(out, "mcp-demo")
    subprocess.run([go, "build", "-o", target, "./examples/mcpdemo/cmd/mcp-demo"], cwd=REPO, check=True)
    _mcp_demo = target
    return target


def mcp_tools_file() -> str:
    """A tools file whose only section is the example MCP server, demo,
    spawned over stdio: its tools are mirrored as demo/{tool}."""
    fd, path = tempfile.mkstemp(prefix="countersign-py-mcp-", suffix=".yaml")
    atexit.register(os.remove, path)
    with os.fdopen(fd, "w") as f:
        f.write("mcp:\n  demo:\n    command: [" + json.dumps(mcp_demo_binary()) + "]\n")
    return path


def run_console(*args: str, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([console_binary(), *args], input=stdin.encode(), capture_output=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"console {' '.join(args)} exited {p.returncode}: {p.stdout.decode()} {p.stderr.decode()}")
    return p


def console_digest(body: str | bytes, actor: str, audience: str) -> tuple[int, str]:
    """The console's own digest of a proposal body: (exit code, stdout)."""
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    p = subprocess.run([console_binary(), "digest", "--actor", actor, "--audience", audience], input=body,
                       capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode("utf-8")


class Console:
    """A running `console serve` over a fresh data directory."""

    def __init__(self, tools: str = TOOLS, *flags: str):
        self.data = tempfile.mkdtemp(prefix="countersign-py-data-")
        self.proc = subprocess.Popen(
            [console_binary(), "serve", "--addr", "127.0.0.1:0", "--data", self.data, "--tools", tools,
             "--log-level", "warn", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.logs: list[str] = []
        found = threading.Event()
        self.url = ""

        def read() -> None:
            for raw in self.proc.stdout:  # type: ignore[union-attr]
                line = raw.decode("utf-8", "replace")
                self.logs.append(line)
                m = re.search(r"http://\S+", line)
                if m and not found.is_set():
                    self.url = m.group(0).rstrip("/")
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(60):
            self.stop()
            raise AssertionError("console did not report its address:\n" + "".join(self.logs))
        run_console("user", "add", OPERATOR, "--role", "operator", "--data", self.data, "--password-stdin",
                    stdin=OPERATOR_PASSWORD + "\n")
        self._browser = None

    def token(self, actor: str, audience: str = "payments-host", owners: Iterable[str] = ()) -> str:
        return run_console("token", "create", "--data", self.data, "--actor", actor, "--audience", audience,
                           *(a for o in owners for a in ("--owner", o))).stdout.decode().strip()

    def revoke_tokens(self, actor: str) -> None:
        """Revoke every token of actor (`console token revoke`): the console
        answers their requests 401 from then on."""
        rows = run_console("token", "list", "--data", self.data).stdout.decode().splitlines()
        ids = [cols[0] for cols in (r.split() for r in rows) if len(cols) > 1 and cols[1] == actor]
        if not ids:
            raise AssertionError(f"no token of {actor} to revoke")
        for i in ids:
            run_console("token", "revoke", i, "--data", self.data)

    def freeze_actor(self, actor: str, reason: str) -> None:
        """Freeze actor's calls (`console freeze --actor`): nothing of theirs
        is approved or redeemed from then on (503 frozen)."""
        run_console("freeze", "--actor", actor, "--reason", reason, "--as", OPERATOR, "--data", self.data)

    def approve(self, call_id: str, digest: str) -> dict:
        return json.loads(run_console("approve", call_id, "--as", OPERATOR, "--digest", digest,
                                      "--data", self.data).stdout)

    def counter(self, call_id: str, digest: str, **sets: str) -> dict:
        """Answer a pending call with an edited one (`console counter`):
        sets maps an args member to its new value as JSON. Returns the
        counter-proposal."""
        flags = [f for k, v in sets.items() for f in ("--set", f"/{k}={v}")]
        return json.loads(run_console("counter", call_id, "--as", OPERATOR, "--digest", digest, *flags,
                                      "--data", self.data).stdout)

    def deny(self, call_id: str, reason: str) -> dict:
        return json.loads(run_console("deny", call_id, "--as", OPERATOR, "--reason", reason,
                                      "--data", self.data).stdout)

    def resolve(self, call_id: str, verdict: str, note: str, evidence: str = "") -> None:
        """Record an operator's resolution of a call whose outcome is
        unknown or whose lease expired, through the console's web form (the
        only way a person resolves one), logged in as the operator."""
        page = self._browse("/calls/" + urllib.parse.quote(call_id, safe=""))
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        if csrf is None:
            raise AssertionError("the call page has no form token")
        after = self._browse("/calls/" + urllib.parse.quote(call_id, safe="") + "/resolve",
                             {"csrf": csrf.group(1), "verdict": verdict, "note": note, "evidence": evidence, "from": "call"})
        if 'data-testid="resolution"' not in after:
            raise AssertionError("the resolution was not recorded: " + after[:2000])

    def revoke_grant(self, call_id: str, reason: str) -> None:
        """Revoke the grant of an approved call that has not been redeemed,
        through the console's web form (the only way a person revokes one),
        logged in as the operator."""
        path = "/calls/" + urllib.parse.quote(call_id, safe="")
        page = self._browse(path)
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        if csrf is None or 'data-testid="revoke-form"' not in page:
            raise AssertionError("the call page offers no revocation: " + page[:2000])
        after = self._browse(path + "/revoke", {"csrf": csrf.group(1), "reason": reason})
        if 'data-testid="revoked-by"' not in after:
            raise AssertionError("the revocation was not recorded: " + after[:2000])

    def approve_plan(self, plan_id: str) -> None:
        """Approve a whole plan once through its page in the console (the
        only way a person approves one), logged in as the operator."""
        path = "/plans/" + urllib.parse.quote(plan_id, safe="")
        page = self._browse(path)
        form = {}
        for name in ("csrf", "digest", "presented"):
            m = re.search(r'name="' + name + r'" value="([^"]*)"', page)
            if m is None or 'data-testid="plan-approve-form"' not in page:
                raise AssertionError("the plan page offers no approval: " + page[:2000])
            form[name] = m.group(1).replace("&amp;", "&")
        after = self._browse(path + "/approve", form)
        if 'data-testid="plan-message"' not in after:
            raise AssertionError("the plan was not approved: " + after[:2000])

    def _browse(self, path: str, form: dict | None = None) -> str:
        """A page of the console as the logged-in operator (logging in the
        first time), or the page a form posted to it leads to."""
        if self._browser is None:
            opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
            self._browser = opener
            login = opener.open(self.url + "/login", timeout=30).read().decode()
            token = re.search(r'name="csrf" value="([^"]+)"', login)
            if token is None:
                raise AssertionError("the login page has no form token")
            self._browse("/login", {"csrf": token.group(1), "name": OPERATOR, "password": OPERATOR_PASSWORD})
        data = None if form is None else urllib.parse.urlencode(form).encode()
        req = urllib.request.Request(self.url + path, data=data, headers={"Origin": self.url, "Accept": "text/html"})
        if data is not None:
            req.add_header("Content-Type", "application/x-www-form-urlencoded")
        with self._browser.open(req, timeout=30) as r:
            return r.read().decode()

    def metric(self, name: str) -> float:
        """A series of /metrics without labels."""
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"/metrics has no {name}")

    def open_waiters(self) -> int:
        with urllib.request.urlopen(self.url + "/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("countersign_open_waiters "):
                    return int(float(line.split()[1]))
        raise AssertionError("/metrics has no countersign_open_waiters")

    def wait_for_waiters(self, n: int, limit: float = 20.0) -> None:
        """Block until n long-polls are held open by the console."""
        deadline = time.monotonic() + limit
        while self.open_waiters() < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"open waiters={self.open_waiters()}, want {n} within {limit}s")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.data, ignore_errors=True)


def read_sections(name: str) -> list[tuple[str, str]]:
    """The (header, body) sections of a corpus file in testdata/: each
    header is a line "-- ... --", each body the text up to the next one."""
    with open(os.path.join(TESTDATA, name), encoding="utf-8", newline="") as f:
        text = f.read()
    parts = re.split(r"^-- (.*) --\n", text, flags=re.M)
    return [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]


def in_thread(fn, *args, **kwargs):
    """Run fn in a thread; returns a function that waits for its result (or
    re-raises its exception) for at most a generous limit."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def result(limit: float = 60.0):
        t.join(limit)
        if t.is_alive():
            raise AssertionError(f"{getattr(fn, '__name__', fn)} did not return within {limit}s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    return result

