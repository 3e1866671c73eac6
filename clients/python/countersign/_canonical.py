"""Canonical form and digest of a call (RFC 8785 over the envelope, SHA-256).

The rule is the console's own (docs/canonical.md): members sorted by their
UTF-16 code units, minimal string escapes, integers in plain decimal, and a
digest of ``countersign/v1/call:`` followed by those bytes. What the console
refuses is refused here too, with the same problem codes and JSON Pointers,
so a digest is never computed for something the console would not hash:

- a float where the tool does not declare a number (``float_not_allowed``);
- an integer outside ±(2^53−1) (``out_of_range``), also a float at a number
  path whose value is integral;
- NaN or an infinity (``malformed_json``: JSON has no such numbers);
- a string or member name holding a lone surrogate (``invalid_utf8``);
- args nested more than 32 containers deep (``too_deep``);
- a malformed envelope: unknown or missing members, wrong types, a tool
  name or target the console would refuse.

Non-integers are allowed only at the paths a caller names in
``number_paths``: the paths that an MCP-mirrored tool's pinned schema types
as ``number``. There they are written as ECMAScript's Number::toString
writes them (RFC 8785 §3.2.2.3), which Python's ``repr`` does not
(``1e-07`` against ``1e-7``, ``1e+16`` against ``1e16``).
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
import unicodedata
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from ._errors import DigestError, Problem

DIGEST_PREFIX = b"countersign/v1/call:"
SCOPE_DIGEST_PREFIX = b"countersign/v1/scope:"
MAX_SAFE_INTEGER = 2**53 - 1
MAX_ARGS_DEPTH = 32
MAX_TOOL_BYTES = 128
MAX_TARGET_BYTES = 512

if sys.float_info.mant_dig != 53 or sys.float_repr_style != "short":
    # The ECMAScript formatting below starts from repr's shortest digits.
    raise ImportError("countersign needs IEEE 754 doubles with the short float repr")

NumberPaths = Union[Iterable[str], Callable[[str], bool], None]

_TOOL_DOTTED = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*\Z")
_TOOL_MCP = re.compile(r"[a-z][a-z0-9-]{0,62}/[A-Za-z0-9_.-]{1,128}\Z")
# Go's unicode.IsSpace: the Latin-1 spaces and the White_Space property.
_WHITE_SPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_ENVELOPE_MEMBERS = ("v", "actor", "audience", "tool", "target", "args")


def format_number(x: float) -> str:
    """Return x as ECMAScript's Number::toString writes it (ECMA-262
    §6.1.6.1.20), the form RFC 8785 requires: ``1e21``, ``1e-7``, ``0.1``,
    ``123.456``, ``-0`` as ``0``. NaN and infinities raise ValueError."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError(f"{x!r} is not a JSON number")
    if x == 0:
        return "0"
    if x < 0:
        return "-" + format_number(-x)
    # repr gives the shortest digits that read back as x, the closest to x
    # of those: the digits ECMAScript chooses. Only the layout differs.
    mantissa, _, exp = repr(x).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0")
    k, n = len(digits), point  # x = 0.DIGITS × 10^n, with k digits
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return "0." + "0" * (-n) + digits
    e = n - 1
    sign = "+" if e >= 0 else "-"
    if k == 1:
        return f"{digits}e{sign}{abs(e)}"
    return f"{digits[0]}.{digits[1:]}e{sign}{abs(e)}"


def _escape_pointer(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


class _Numbers:
    """The places where a non-integer is accepted, as the console keeps
    them: a tree of member names, with ``*`` standing for every item of an
    array (the console's NumberPaths.Items)."""

    def __init__(self) -> None:
        self.here = False
        self.members: dict[str, "_Numbers"] = {}
        self.items: Optional["_Numbers"] = None

    @classmethod
    def of(cls, number_paths: NumberPaths) -> "_Numbers | _Predicate | None":
        if number_paths is None:
            return None
        if callable(number_paths):
            return _Predicate(number_paths)
        if isinstance(number_paths, str):
            raise TypeError("number_paths is a collection of JSON Pointers, not one string")
        root = cls()
        for p in number_paths:
            if p != "" and not p.startswith("/"):
                raise ValueError(f"{p!r} is not a JSON Pointer")
            node = root
            for seg in p.split("/")[1:] if p else []:
                if seg == "*":
                    node.items = node.items or cls()
                    node = node.items
                else:
                    node = node.members.setdefault(seg.replace("~1", "/").replace("~0", "~"), cls())
            node.here = True
        return root

    def member(self, name: str, path: str) -> "_Numbers | None":
        return self.members.get(name)

    def item(self, path: str) -> "_Numbers | None":
        return self.items

    def accepts(self, path: str) -> bool:
        return self.here


class _Predicate:
    """number_paths given as a function of the JSON Pointer."""

    def __init__(self, fn: Callable[[str], bool]):
        self.fn = fn

    def member(self, name: str, path: str) -> "_Predicate":
        return self

    def item(self, path: str) -> "_Predicate":
        return self

    def accepts(self, path: str) -> bool:
        return bool(self.fn(path))


def _lone_surrogate(s: str) -> str | None:
    for ch in s:
        if "\ud800" <= ch <= "\udfff":
            return ch
    return None


def _utf16_key(name: str) -> bytes:
    # Sorting by UTF-16 code units (big-endian bytes compare the same way).
    return name.encode("utf-16-be", "surrogatepass")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f]')


def _quote(s: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), "\\u%04x" % ord(m.group())), s) + '"'


class _Encoder:
    """Writes canonical text and collects every problem on the way."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.out: list[str] = []

    def problem(self, code: str, path: str, message: str) -> None:
        self.problems.append(Problem(code, path, message))

    def string(self, s: str, path: str) -> None:
        bad = _lone_surrogate(s)
        if bad is not None:
            self.problem("invalid_utf8", path, f"lone surrogate \\u{ord(bad):04x}: a string must be valid Unicode")
            return
        self.out.append(_quote(s))

    def value(self, v: Any, path: str, depth: int, num: Any = None) -> None:
        if v is None:
            self.out.append("null")
        elif v is True:
            self.out.append("true")
        elif v is False:
            self.out.append("false")
        elif isinstance(v, int):
            if -MAX_SAFE_INTEGER <= v <= MAX_SAFE_INTEGER:
                self.out.append(str(int(v)))
            else:
                self.problem("out_of_range", path, f"integer {v} is outside ±{MAX_SAFE_INTEGER}")
        elif isinstance(v, float):
            self.number(v, path, num)
        elif isinstance(v, str):
            self.string(v, path)
        elif isinstance(v, Mapping):
            self.container(path, depth)
            self.object(v, path, depth + 1, num)
        elif isinstance(v, (list, tuple)):
            self.container(path, depth)
            self.array(v, path, depth + 1, num)
        else:
            self.problem("wrong_type", path, f"a {type(v).__name__} is not a JSON value (use dict, list, str, int, bool or None)")

    def container(self, path: str, depth: int) -> None:
        # depth counts containers from args, args itself being 1.
        if depth == MAX_ARGS_DEPTH + 1:
            self.problem("too_deep", path, f"args nest more than {MAX_ARGS_DEPTH} containers deep")

    def number(self, x: float, path: str, num: Any) -> None:
        if math.isnan(x) or math.isinf(x):
            self.problem("malformed_json", path, f"{x!r} is not a JSON number")
        elif num is None or not num.accepts(path):
            self.problem("float_not_allowed", path,
                         f"{x!r} is not an integer; only integers are accepted here (money is an integer in minor units)")
        elif x.is_integer() and abs(x) > MAX_SAFE_INTEGER:
            self.problem("out_of_range", path, f"{format_number(x)} is integral and outside ±{MAX_SAFE_INTEGER}")
        else:
            self.out.append(format_number(x))

    def object(self, o: Mapping, path: str, depth: int, num: Any) -> None:
        members = []
        for name, v in o.items():
            if not isinstance(name, str):
                self.problem("wrong_type", path, f"member name {name!r} is not a string")
                continue
            if _lone_surrogate(name) is not None:
                self.problem("invalid_utf8", path, f"member name {name!r} holds a lone surrogate")
                continue
            members.append((name, v))
        members.sort(key=lambda m: _utf16_key(m[0]))
        self.out.append("{")
        for i, (name, v) in enumerate(members):
            if i:
                self.out.append(",")
            self.out.append(_quote(name) + ":")
            child = f"{path}/{_escape_pointer(name)}"
            self.value(v, child, depth, num and num.member(name, child))
        self.out.append("}")

    def array(self, a: list | tuple, path: str, depth: int, num: Any) -> None:
        self.out.append("[")
        for i, v in enumerate(a):
            if i:
                self.out.append(",")
            child = f"{path}/{i}"
            self.value(v, child, depth, num and num.item(child))
        self.out.append("]")


_PARSE_CODES = {"malformed_json", "invalid_utf8", "duplicate_key", "float_not_allowed", "out_of_range", "too_deep", "too_large"}


def _refuse(problems: list[Problem]) -> DigestError:
    if len(problems) == 1 and problems[0].code in _PARSE_CODES:
        code, message = problems[0].code, problems[0].message
    else:
        code = "invalid_arguments"
        message = "1 problem in the envelope" if len(problems) == 1 else f"{len(problems)} problems in the envelope"
    return DigestError(code, message, problems)


def canonical_bytes(value: Any, *, number_paths: NumberPaths = None, base: str = "") -> bytes:
    """Return the RFC 8785 bytes of a JSON value (dict, list, tuple, str,
    int, bool, None; floats only at number_paths, pointers from base).
    Raises DigestError listing every problem."""
    enc = _Encoder()
    num = _Numbers.of(number_paths)
    for seg in base.split("/")[1:] if base else []:
        num = num and num.member(seg, base)
    enc.value(value, base, 1, num)
    if enc.problems:
        raise _refuse(enc.problems)
    return "".join(enc.out).encode("utf-8")


def envelope(actor: str, audience: str, tool: str, target: str, args: Mapping[str, Any]) -> dict:
    """Build the envelope that is hashed: {"v":1,"actor","audience","tool","target","args"}.
    Actor and audience are the token's (a Call carries them)."""
    return {"v": 1, "actor": actor, "audience": audience, "tool": tool, "target": target, "args": args}


def valid_tool_name(tool: str) -> bool:
    """Whether tool is a name the console accepts: dotted lower-case words
    (payments.refund), or {server}/{tool} for a tool mirrored from MCP."""
    return len(tool.encode("utf-8", "surrogatepass")) <= MAX_TOOL_BYTES and bool(
        _TOOL_DOTTED.match(tool) or _TOOL_MCP.match(tool))


def _check_envelope(env: Any) -> list[Problem]:
    problems: list[Problem] = []
    add = lambda code, path, msg: problems.append(Problem(code, path, msg))  # noqa: E731
    if not isinstance(env, Mapping):
        add("wrong_type", "", "the envelope must be a dict with v, actor, audience, tool, target and args")
        return problems
    for name in env:
        if name not in _ENVELOPE_MEMBERS:
            add("unknown_field", "/" + _escape_pointer(str(name)),
                f"{name!r} is not a member of an envelope (allowed: {', '.join(_ENVELOPE_MEMBERS)})")
    for name in _ENVELOPE_MEMBERS:
        if name not in env:
            add("missing_field", "/" + name, f"{name} is required")
    if "v" in env and (env["v"] is True or env["v"] is False or env["v"] != 1 or not isinstance(env["v"], int)):
        add("wrong_type", "/v", "v must be the integer 1")
    for name in ("actor", "audience", "tool", "target"):
        if name in env and not isinstance(env[name], str):
            add("wrong_type", "/" + name, f"{name} must be a string, not {type(env[name]).__name__}")
    tool = env.get("tool")
    if isinstance(tool, str) and _lone_surrogate(tool) is None and not valid_tool_name(tool):
        add("invalid_tool", "/tool",
            f"tool must be dotted lower-case words like payments.refund, at most {MAX_TOOL_BYTES} bytes")
    target = env.get("target")
    if isinstance(target, str) and _lone_surrogate(target) is None:
        if all(ch in _WHITE_SPACE for ch in target):
            add("empty_string", "/target", "target must not be empty or only white space")
        elif len(target.encode("utf-8")) > MAX_TARGET_BYTES:
            add("invalid_target", "/target",
                f"target is {len(target.encode('utf-8'))} bytes; at most {MAX_TARGET_BYTES} are allowed")
        else:
            for ch in target:
                if unicodedata.category(ch) in ("Cc", "Cf"):
                    add("invalid_target", "/target", f"target contains the invisible or control character U+{ord(ch):04X}")
                    break
    if "args" in env and not isinstance(env["args"], Mapping):
        add("wrong_type", "/args", f"args must be a dict, not {type(env['args']).__name__}")
    return problems


def canonical_envelope(env: Mapping[str, Any], *, number_paths: NumberPaths = None) -> bytes:
    """Return the canonical bytes of an envelope: the bytes hashed after the
    prefix. Raises DigestError when the console would refuse it."""
    problems = _check_envelope(env)
    enc = _Encoder()
    num = _Numbers.of(number_paths)
    if isinstance(env, Mapping):
        # The members in canonical order (all ASCII names): actor, args,
        # audience, target, tool, v; args counts as the first container.
        enc.out.append("{")
        for i, name in enumerate(("actor", "args", "audience", "target", "tool")):
            enc.out.append(("," if i else "") + _quote(name) + ":")
            v = env.get(name)
            if name == "args":
                if isinstance(v, Mapping):
                    enc.value(v, "/args", 1, num and num.member("args", "/args"))
            elif isinstance(v, str):
                enc.string(v, "/" + name)
        enc.out.append(',"v":1}')
    problems += enc.problems
    if problems:
        raise _refuse(problems)
    return "".join(enc.out).encode("utf-8")


def digest_of(env: Mapping[str, Any], *, number_paths: NumberPaths = None) -> str:
    """Return the digest of an envelope: lowercase hex SHA-256 of
    ``countersign/v1/call:`` followed by its canonical bytes.

    number_paths names the JSON Pointers (from the envelope's root, such as
    ``/args/temperature``; ``*`` stands for every item of an array, as in
    ``/args/points/*/x``) at which the tool's schema declares a number; or
    it is a function of the pointer. Raises DigestError, carrying the
    console's problem codes and pointers, for anything the console refuses.
    """
    return hashlib.sha256(DIGEST_PREFIX + canonical_envelope(env, number_paths=number_paths)).hexdigest()


def scope_digest(scope: Mapping[str, Any]) -> str:
    """Return the digest of an allowance's scope (docs/allowances.md):
    lowercase hex SHA-256 of ``countersign/v1/scope:`` followed by the
    RFC 8785 bytes of the materialised scope, as the console shows it with
    the scope in words. Raises DigestError for anything that is not JSON
    the console accepts (fractions, integers beyond ±(2^53−1))."""
    if not isinstance(scope, Mapping):
        raise TypeError("a scope is a JSON object (a dict)")
    return hashlib.sha256(SCOPE_DIGEST_PREFIX + canonical_bytes(scope)).hexdigest()


def without(args: Mapping[str, Any], pointers: Iterable[str]) -> dict:
    """Return a copy of args without the members that the JSON Pointers
    (relative to args, such as ``/notes``) name: the tool's informational
    members, which the digest leaves out. Only members reached through
    objects can be removed; a pointer that names nothing is ignored."""
    out = _copy(args)
    for p in pointers:
        if not p.startswith("/"):
            raise ValueError(f"{p!r} is not a JSON Pointer into args")
        segs = [s.replace("~1", "/").replace("~0", "~") for s in p[1:].split("/")]
        node: Any = out
        for s in segs[:-1]:
            node = node.get(s) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(segs[-1], None)
    return out


def _copy(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_copy(x) for x in v]
    return v
