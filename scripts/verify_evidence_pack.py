#!/usr/bin/env python3
"""Check a Countersign evidence pack offline, without Countersign.

    python3 scripts/verify_evidence_pack.py PACK.tar --audit-key-fingerprint HEX
    python3 scripts/verify_evidence_pack.py PACK.tar --checkpoint KEPT.jsonl
    python3 scripts/verify_evidence_pack.py PACK.tar --data DATA_DIR

Nothing the pack brings is trusted: the audit key must come from outside it,
as the SHA-256 of its raw public key (64 hex digits), as checkpoints you kept
(each one within the pack's chain must match it), or as a console's data
directory (its audit-key file). The checks: the manifest's signature and
every file's SHA-256; every entry of the chain (canonical form, hash, links,
the signed header, a signed checkpoint at both ends); every checkpoint; the
passkey evidence of every approval signed with a passkey; that every redeemed
digest equals a digest an approval of the call approved; and each call's
lineage against the chain (docs/evidence.md). It reads the pack in pieces, the
lineage beside the chain, so its memory does not grow with the pack's length.

Needs Python 3 and the `cryptography` package (Debian: python3-cryptography).
Exit status: 0 when every check passes; 1 when the pack is damaged or signed
by a key nothing given trusts; 2 on a usage error; 3 when `cryptography` is
missing, so no signature could be checked (SIGNATURES NOT CHECKED).
"""

import argparse
import base64
import hashlib
import io
import json
import os
import posixpath
import sys
import tarfile

try:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
except ImportError:  # reported in main, before anything is checked
    ed25519 = None

FORMAT = "countersign-evidence-pack/v1"
EXPORT_FORMAT = "countersign-audit-export/v2"
MANIFEST_PREFIX = b"countersign/v1/evidence-manifest:"
HEADER_PREFIX = b"countersign/v1/export-header:"
CHECKPOINT_PREFIX = b"countersign/v1/checkpoint:"
GENESIS = "0" * 64
MAX_PACK_BYTES = 4 << 30


class Damage(Exception):
    """The pack does not verify: where, and what is wrong."""

    def __init__(self, where, reason, seq=0):
        super().__init__(reason)
        self.where, self.reason, self.seq = where, reason, seq

    def __str__(self):
        if self.seq:
            return "%s: entry %d: %s" % (self.where, self.seq, self.reason)
        return "%s: %s" % (self.where, self.reason) if self.where else self.reason


class Untrusted(Exception):
    pass


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def no_float(s):
    raise ValueError("a number with a fraction or exponent: %s" % s)


def jcs(v):
    """RFC 8785 canonical JSON of a value holding no floats, as bytes."""
    return _jcs(v).encode("utf-8")


def _jcs(v):
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ",".join(_jcs(x) for x in v) + "]"
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode("utf-16-be"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _jcs(v[k]) for k in keys) + "}"
    raise ValueError("cannot encode %r canonically" % type(v))


def canonical_line(where, line, n):
    """Parses one line that must be canonical JSON (any byte changed shows)."""
    try:
        v = json.loads(line.decode("utf-8"), parse_float=no_float)
        if jcs(v) != line:
            raise ValueError("not in canonical form (the line was edited)")
    except ValueError as e:
        raise Damage(where, "line %d: %s" % (n, e))
    return v


def key_id(raw):
    return hashlib.sha256(raw).hexdigest()[:16]


def ed_verify(public_key_b64, signature_b64, message):
    try:
        raw = b64url(public_key_b64)
        ed25519.Ed25519PublicKey.from_public_bytes(raw).verify(b64url(signature_b64), message)
        return True
    except (InvalidSignature, ValueError):
        return False


class Trust:
    """The audit keys given from outside the pack, and kept checkpoints."""

    def __init__(self, fingerprints, checkpoints, data_keys):
        self.fingerprints = set(fingerprints)
        self.checkpoints = checkpoints
        self.keys = set(data_keys) | {c["public_key"] for c in checkpoints}

    def empty(self):
        return not (self.fingerprints or self.keys)

    def trusts(self, public_key_b64):
        try:
            raw = b64url(public_key_b64)
        except ValueError:
            return False
        return len(raw) == 32 and (public_key_b64 in self.keys or hashlib.sha256(raw).hexdigest() in self.fingerprints)


def read_checkpoints(path):
    """One or more checkpoints, each as the endpoint returns it or as an export's {"checkpoint":...} line."""
    text = open(path, encoding="utf-8").read()
    dec, i, out = json.JSONDecoder(), 0, []
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            break
        v, i = dec.raw_decode(text, i)
        if set(v) == {"checkpoint"}:
            v = v["checkpoint"]
        if set(v) != {"seq", "head", "time", "kid", "public_key", "signature"}:
            raise ValueError("%s: checkpoint %d has members %s" % (path, len(out) + 1, sorted(v)))
        out.append(v)
    if not out:
        raise ValueError("%s holds no checkpoint" % path)
    return out


def data_key(directory):
    with open(os.path.join(directory, "audit-key"), "rb") as f:
        priv = serialization.load_pem_private_key(f.read(), password=None)
    raw = priv.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


MAX_SMALL_BYTES = 16 << 20
CHUNK = 1 << 20
EMPTY_SUM = hashlib.sha256(b"").hexdigest()
# The kinds after which a call can be neither approved nor redeemed: its
# status is final (a revoked grant is never redeemed).
FINAL_KINDS = {"denied", "expired", "cancelled", "redeemed", "countered", "revoked"}


class Pack:
    """A pack's files, found without reading them; each is read in pieces."""

    def __init__(self, path):
        try:
            self._index(path)
        except tarfile.TarError as e:
            raise Damage("", "the pack is not a readable tar archive: %s" % e)

    def _index(self, path):
        self.tf = tarfile.open(path, "r:")
        self.members, total = {}, 0
        for m in self.tf:
            if not m.isreg():
                raise Damage(m.name, "not a regular file")
            if m.name != posixpath.normpath(m.name) or m.name.startswith(("/", "../")) or m.name == "..":
                raise Damage(m.name, "not a plain relative file name")
            if m.name in self.members:
                raise Damage(m.name, "in the pack twice")
            total += m.size
            if total > MAX_PACK_BYTES:
                raise Damage("", "the pack is larger than %d bytes" % MAX_PACK_BYTES)
            self.members[m.name] = m
        # tarfile keeps every member it read; the index above is all we need.
        self.tf.members = []

    def open(self, name):
        m = self.members.get(name)
        return self.tf.extractfile(m) if m is not None else io.BytesIO(b"")

    def small(self, name):
        m = self.members.get(name)
        if m is None:
            return None
        if m.size > MAX_SMALL_BYTES:
            raise Damage(name, "larger than %d bytes" % MAX_SMALL_BYTES)
        return self.open(name).read()

    def sha256(self, name):
        h, f, n = hashlib.sha256(), self.open(name), 0
        while True:
            b = f.read(CHUNK)
            if not b:
                return h.hexdigest(), n
            h.update(b)
            n += len(b)

    def lines(self, name):
        """The file's lines, each with its newline, read in pieces."""
        return iter(self.open(name).readline, b"")


def check_manifest(pack, trust):
    """Checks the signature and every file's SHA-256; returns the manifest, the signature and each file's SHA-256."""
    if "MANIFEST.sig" not in pack.members:
        raise Damage("MANIFEST.sig", "missing: the pack is not signed")
    if "MANIFEST.json" not in pack.members:
        raise Damage("MANIFEST.json", "missing")
    try:
        sig = json.loads(pack.small("MANIFEST.sig"))
        assert set(sig) == {"kid", "public_key", "signature"}
        raw = b64url(sig["public_key"])
        assert len(raw) == 32 and key_id(raw) == sig["kid"]
    except (ValueError, AssertionError, TypeError):
        raise Damage("MANIFEST.sig", "does not read as the audit key and its signature")
    if not trust.trusts(sig["public_key"]):
        raise Untrusted("the manifest is signed by audit key %s (fingerprint %s)" % (sig["kid"], hashlib.sha256(raw).hexdigest()))
    manifest_raw = pack.small("MANIFEST.json")
    if not ed_verify(sig["public_key"], sig["signature"], MANIFEST_PREFIX + manifest_raw):
        raise Damage("MANIFEST.json", "its signature does not verify (the manifest was altered or swapped)")
    m = json.loads(manifest_raw)
    if m.get("format") != FORMAT:
        raise Damage("MANIFEST.json", "format %r, want %r" % (m.get("format"), FORMAT))
    sums = {}
    for f in m["files"]:
        if f["name"] not in pack.members:
            raise Damage(f["name"], "listed in the manifest but not in the pack")
        got, n = pack.sha256(f["name"])
        if got != f["sha256"] or n != f["size"]:
            raise Damage(f["name"], "its SHA-256 differs from the manifest's (the file was altered)")
        sums[f["name"]] = got
    for name in sorted(pack.members):
        if name not in sums and name not in ("MANIFEST.json", "MANIFEST.sig"):
            raise Damage(name, "in the pack but not in the manifest (a file was added)")
    try:
        ak = json.loads(pack.small("keys/audit.json"))
    except (TypeError, ValueError):
        ak = {}
    if ak.get("public_key") != sig["public_key"]:
        raise Damage("keys/audit.json", "does not name the key that signed the manifest")
    return m, sig, sums


def check_checkpoint(c, trust, where):
    raw = b64url(c["public_key"])
    if len(raw) != 32 or key_id(raw) != c["kid"]:
        raise Damage(where, "checkpoint at entry %d: its kid does not name its public key" % c["seq"])
    msg = CHECKPOINT_PREFIX + jcs({"head": c["head"], "seq": c["seq"], "time": c["time"]})
    if not ed_verify(c["public_key"], c["signature"], msg):
        raise Damage(where, "checkpoint signature does not verify (the checkpoint was altered or forged)", c["seq"])
    if not trust.trusts(c["public_key"]):
        raise Damage(where, "checkpoint at entry %d is signed by key %s, which is not trusted" % (c["seq"], c["kid"]), c["seq"])


ENTRY_FIELDS = {"call_id", "channel", "details", "hash", "kind", "prev_hash", "principal", "seq", "time"}


def check_chain(lines, trust, manifest, on_entry):
    """Verifies the chain line by line, calling on_entry with each entry that verified.
    Returns the header, the checkpoints, the SHA-256 of their lines, and notes."""
    where = "chain.jsonl"
    header, cps, cp_sum = None, [], hashlib.sha256()
    prev, first_hash, count, cp_heads, kept = None, None, 0, {}, {}
    for c in trust.checkpoints:
        kept.setdefault(c["seq"], []).append(c)
    seen_kept = set()
    n = 0
    for raw in lines:
        n += 1
        if not raw.endswith(b"\n"):
            raise Damage(where, "does not end with a newline (the file was cut short)")
        line = raw[:-1]
        v = canonical_line(where, line, n)
        if set(v) == {"export"}:
            if n != 1:
                raise Damage(where, "line %d: a header line must come first, and only once" % n)
            header = v["export"]
            if header.get("format") != EXPORT_FORMAT:
                raise Damage(where, "its header is not signed")
            h = dict(header)
            del h["signature"]
            pub = b64url(header["public_key"])
            if len(pub) != 32 or key_id(pub) != header["kid"]:
                raise Damage(where, "the export header's kid does not name its public key")
            if not ed_verify(header["public_key"], header["signature"], HEADER_PREFIX + jcs(h)):
                raise Damage(where, "the export header's signature does not verify (the header was altered)")
            if not trust.trusts(header["public_key"]):
                raise Damage(where, "the export header is signed by key %s, which is not trusted" % header["kid"])
            continue
        if header is None:
            raise Damage(where, "line 1 is not the export header")
        if set(v) == {"checkpoint"}:
            if prev is not None:
                raise Damage(where, "line %d: a checkpoint line after the entries" % n)
            check_checkpoint(v["checkpoint"], trust, where)
            cps.append(v["checkpoint"])
            cp_heads.setdefault(v["checkpoint"]["seq"], []).append(v["checkpoint"]["head"])
            cp_sum.update(raw)
            continue
        if set(v) != ENTRY_FIELDS:
            raise Damage(where, "line %d is not an entry" % n)
        want_seq = header["from_seq"] if prev is None else prev[0] + 1
        if v["seq"] != want_seq:
            raise Damage(where, "expected entry %d, found %d (an entry is missing or out of order)" % (want_seq, v["seq"]), want_seq)
        want_prev = header["prev_hash"] if prev is None else prev[1]
        if v["prev_hash"] != want_prev:
            raise Damage(where, "prev_hash does not match the previous entry's hash", v["seq"])
        body = {k: v[k] for k in ENTRY_FIELDS if k != "hash"}
        if hashlib.sha256(bytes.fromhex(v["prev_hash"]) + jcs(body)).hexdigest() != v["hash"]:
            raise Damage(where, "hash does not match the entry's contents (the entry was altered)", v["seq"])
        if v["seq"] != header["from_seq"] - 1:
            for head in cp_heads.get(v["seq"], []):
                if head != v["hash"]:
                    raise Damage(where, "differs from the signed checkpoint at this entry", v["seq"])
        for c in kept.get(v["seq"], []):
            seen_kept.add(id(c))
            if c["head"] != v["hash"]:
                check_checkpoint(c, trust, "--checkpoint")
                raise Damage(where, "differs from the checkpoint you kept at this entry", v["seq"])
        on_entry(v)
        count += 1
        prev = (v["seq"], v["hash"])
    if header is None or count == 0:
        raise Damage(where, "holds no entry")
    last_seq, last_hash = prev
    if last_seq < header["to_seq"]:
        raise Damage(where, "the export ends at entry %d but its header says it runs to entry %d (lines were removed from the end)"
                     % (last_seq, header["to_seq"]), last_seq + 1)
    if last_seq > header["to_seq"] or header["count"] != count or header["head"] != last_hash:
        raise Damage(where, "the entries differ from the header's range, count or head")
    for c in cps:
        if c["seq"] != header["from_seq"] - 1 and not header["from_seq"] <= c["seq"] <= last_seq:
            raise Damage(where, "differs from the signed checkpoint at this entry", c["seq"])
    at = {c["seq"] for c in cps}
    # The oldest entry kept after a prune: the checkpoint at the last entry
    # removed vouches for its prev_hash.
    if any(c["seq"] == header["from_seq"] - 1 and c["head"] == header["prev_hash"] for c in cps):
        at.add(header["from_seq"])
    if header["from_seq"] != 1 and header["from_seq"] not in at:
        raise Damage(where, "the section does not start at a signed checkpoint (or at entry 1)", header["from_seq"])
    if header["to_seq"] not in at:
        raise Damage(where, "the section does not end at a signed checkpoint (entries were cut from its end)", header["to_seq"])
    chain = manifest["chain"]
    if (chain["from_seq"], chain["to_seq"], chain["count"], chain["head"]) != (header["from_seq"], header["to_seq"], header["count"], header["head"]):
        raise Damage("MANIFEST.json", "its chain range differs from the chain's header")
    notes = []
    for c in trust.checkpoints:
        check_checkpoint(c, trust, "--checkpoint")
        if c["seq"] > header["to_seq"] and manifest.get("until") and c["time"] < manifest["until"]:
            # Signed before the period's end, it covers entries of the period.
            raise Damage(where, "the section ends at entry %d, but the checkpoint you kept at entry %d was signed at %s, within the "
                         "period: entries were cut from its end" % (header["to_seq"], c["seq"], c["time"]), header["to_seq"] + 1)
        if id(c) in seen_kept:
            continue
        if c["seq"] > header["to_seq"]:
            notes.append("the checkpoint you gave at entry %d was signed after the period and was not compared" % c["seq"])
        else:
            notes.append("the checkpoint you gave at entry %d falls outside the section and was not compared" % c["seq"])
    return header, cps, cp_sum.hexdigest(), notes


class PasskeyTrail:
    """Re-verifies every passkey approval as the chain goes by; the files derived from it must equal the pack's."""

    def __init__(self, passkey_verify):
        self.passkey_verify = passkey_verify
        self.keys, self.removed, self.verified, self.pending = {}, {}, 0, []
        self.key_sum, self.ev_sum = hashlib.sha256(), hashlib.sha256()
        self.error = None

    def entry(self, e):
        if self.error is None:
            try:
                self._entry(e)
            except Damage as d:
                self.error = d

    def _entry(self, e):
        kind = e["kind"]
        if kind not in ("pruned", "passkey_registered", "passkey_removed", "approved"):
            return
        d = json.loads(jcs(e["details"]))
        if kind == "pruned":
            # The passkeys live when older entries were removed: they settle
            # the approvals whose registration was removed (docs/audit.md §6).
            live = {p["credential_id"]: (p["user"], p["public_key"]) for p in d.get("snapshot", {}).get("passkeys", [])}
            still = []
            for seq, cred, key, user in self.pending:
                if cred not in live:
                    still.append((seq, cred, key, user))
                elif b64url(live[cred][1]) != b64url(key):
                    raise Damage("chain.jsonl", "the passkey that signed entry %d has another public key in this pruned entry's snapshot" % seq, e["seq"])
                elif live[cred][0] != user:
                    raise Damage("chain.jsonl", "the passkey that signed entry %d is registered to %s in this pruned entry's snapshot, not to %s"
                                 % (seq, live[cred][0], user), e["seq"])
            self.pending = still
            for cred, reg in live.items():
                if cred not in self.keys and cred not in self.removed:
                    self.keys[cred] = reg
        elif kind == "passkey_registered":
            self.keys[d["credential_id"]] = (d.get("user") or e["principal"], d.get("public_key"))
            self.removed.pop(d["credential_id"], None)
            self.key_sum.update(jcs({"seq": e["seq"], "hash": e["hash"], "user": d.get("user"), "credential_id": d.get("credential_id"),
                                     "name": d.get("name"), "public_key": d.get("public_key")}) + b"\n")
        elif kind == "passkey_removed":
            self.keys.pop(d["credential_id"], None)
            self.removed[d["credential_id"]] = e["seq"]
        elif kind == "approved" and d.get("method") == "passkey":
            ev = d.get("evidence")
            self.ev_sum.update(jcs({"seq": e["seq"], "hash": e["hash"], "call_id": e["call_id"], "operator": e["principal"],
                                    "digest": d.get("digest"), "evidence": ev}) + b"\n")
            problem = self.passkey_verify(ev, e["call_id"], d.get("digest"), e["principal"])
            if problem:
                raise Damage("chain.jsonl", "the passkey signature of this approval does not verify: " + problem, e["seq"])
            cred = ev.get("credential_id")
            if cred in self.removed:
                raise Damage("chain.jsonl", "the passkey that signed this approval was removed at entry %d, before it" % self.removed[cred], e["seq"])
            if cred not in self.keys:
                self.pending.append((e["seq"], cred, ev["public_key"], e["principal"]))
            else:
                user, key = self.keys[cred]
                if b64url(key) != b64url(ev["public_key"]):
                    raise Damage("chain.jsonl", "the passkey that signed this approval is not the one registered (another public key)", e["seq"])
                if user != e["principal"]:
                    raise Damage("chain.jsonl", "the passkey that signed this approval is registered to %s, not to %s" % (user, e["principal"]), e["seq"])
            self.verified += 1

    def finish(self, sums):
        if self.error is not None:
            raise self.error
        if self.key_sum.hexdigest() != sums.get("keys/passkeys.jsonl", EMPTY_SUM):
            raise Damage("keys/passkeys.jsonl", "differs from the passkey registrations in the chain")
        if self.ev_sum.hexdigest() != sums.get("passkey-evidence.jsonl", EMPTY_SUM):
            raise Damage("passkey-evidence.jsonl", "differs from the passkey evidence the chain's approvals hold")
        return self.verified, ["the passkey that signed entry %d was registered before the section: its signature verified, "
                               "its key was not compared with its registration" % seq for seq, _, _, _ in self.pending]


class OutOfOrder(Exception):
    """The lineage does not follow the chain: a pack whose lineage is in the order of the call ids."""


class CallCheck:
    """Checks, as the chain goes by, that every redeemed digest was approved, and each call's lineage line,
    read side by side with the chain (lineage.jsonl is in the order of the calls' first entries in the
    section). It holds, per call still open at that point of the chain, the digests its approvals approved
    and its lineage line; a call's state goes when its status is final."""

    def __init__(self, lineage_lines):
        self.lines, self.line_no, self.next = lineage_lines, 0, None
        self.calls, self.redeemed, self.checked = {}, 0, 0
        self.redeem_error = self.lineage_error = self.next_error = None
        self.advance()

    def advance(self):
        self.next = None
        while self.next_error is None:
            line = next(self.lines, None)
            if line is None:
                return
            self.line_no += 1
            line = line.rstrip(b"\n")
            if not line:
                continue
            try:
                l = json.loads(line)
                l["lineage"], l["call_id"]
            except (ValueError, KeyError, TypeError) as e:
                self.next_error = Damage("lineage.jsonl", "line %d does not read: %s" % (self.line_no, e))
                return
            self.next = (self.line_no, l)
            return

    def bad(self, claim, what):
        if self.lineage_error is None:
            i, l = claim
            self.lineage_error = Damage("lineage.jsonl", "line %d (call %s): %s differs from the chain" % (i, l["call_id"], what))

    def entry(self, e):
        cid = e["call_id"]
        if not cid:
            return
        st = self.calls.get(cid)
        if self.next is not None and self.next[1]["call_id"] == cid and (st is None or st["claim"] is None):
            if st is None:
                st = self.calls[cid] = {"approved": [], "claim": None}
            st["claim"] = self.next
            self.checked += 1
            self.advance()
        kind, d = e["kind"], e["details"]
        claim = st["claim"] if st is not None else None
        if kind == "submitted":
            if claim and (claim[1]["lineage"].get("proposed", {}).get("digest") != d.get("digest") or claim[1].get("digest") != d.get("digest")):
                self.bad(claim, "the proposed digest")
        elif kind == "approved":
            if st is None:
                st = self.calls[cid] = {"approved": [], "claim": None}
            st["approved"].append(d.get("digest"))
        elif kind == "redeemed":
            if self.redeem_error is None:
                if st is None or not st["approved"]:
                    self.redeem_error = Damage("chain.jsonl", "the call was redeemed, but no approval of it is in the chain section", e["seq"])
                elif d.get("digest") not in st["approved"]:
                    self.redeem_error = Damage("chain.jsonl", "the redeemed digest %s is not a digest any approval of the call approved" % d.get("digest"), e["seq"])
                else:
                    self.redeemed += 1
            if claim and (claim[1]["lineage"].get("redeemed") or {}).get("digest") != d.get("digest"):
                self.bad(claim, "the redeemed digest")
        if st is not None and kind in FINAL_KINDS:
            self.settle(st)
            del self.calls[cid]

    def settle(self, st):
        if st["claim"] is None or not st["approved"]:
            return
        for dec in st["claim"][1]["lineage"].get("decided") or []:
            if dec.get("verdict") == "approved" and dec.get("digest") not in st["approved"]:
                self.bad(st["claim"], "an approval's digest")
                return

    def finish_redeemed(self):
        if self.redeem_error is not None:
            raise self.redeem_error
        return self.redeemed

    def finish_lineage(self):
        for st in self.calls.values():
            self.settle(st)
        if self.lineage_error is not None:
            raise self.lineage_error
        if self.next_error is not None:
            raise self.next_error
        if self.next is not None:
            raise OutOfOrder()
        return self.checked


def check_lineage_in_memory(lineage_lines, chain_lines):
    """The lineage of a pack whose lines do not follow the chain: what the chain says of every call is held in memory."""
    submitted, redeemed, approved = {}, {}, {}
    for raw in chain_lines:
        v = json.loads(raw)
        if "kind" not in v:
            continue
        d = v["details"]
        if v["kind"] == "submitted":
            submitted[v["call_id"]] = d.get("digest")
        elif v["kind"] == "redeemed":
            redeemed[v["call_id"]] = d.get("digest")
        elif v["kind"] == "approved":
            approved.setdefault(v["call_id"], []).append(d.get("digest"))
    n = 0
    for i, line in enumerate(lineage_lines, 1):
        line = line.rstrip(b"\n")
        if not line:
            continue
        try:
            l = json.loads(line)
            lin, cid = l["lineage"], l["call_id"]
        except (ValueError, KeyError, TypeError) as e:
            raise Damage("lineage.jsonl", "line %d does not read: %s" % (i, e))

        def bad(what):
            return Damage("lineage.jsonl", "line %d (call %s): %s differs from the chain" % (i, cid, what))
        if cid in submitted and (submitted[cid] != lin.get("proposed", {}).get("digest") or submitted[cid] != l.get("digest")):
            raise bad("the proposed digest")
        if cid in redeemed and (lin.get("redeemed") or {}).get("digest") != redeemed[cid]:
            raise bad("the redeemed digest")
        if cid in approved:
            for dec in lin.get("decided") or []:
                if dec.get("verdict") == "approved" and dec.get("digest") not in approved[cid]:
                    raise bad("an approval's digest")
        n += 1
    return n


def verify(path, trust, passkey_verify):
    pack = Pack(path)
    manifest, sig, sums = check_manifest(pack, trust)
    trail, calls = PasskeyTrail(passkey_verify), CallCheck(pack.lines("lineage.jsonl"))

    def on_entry(e):
        trail.entry(e)
        calls.entry(e)
    header, cps, cp_sum, notes = check_chain(pack.lines("chain.jsonl"), trust, manifest, on_entry)
    redeemed = calls.finish_redeemed()
    if cp_sum != sums.get("checkpoints.jsonl", EMPTY_SUM):
        raise Damage("checkpoints.jsonl", "differs from the checkpoints in the chain")
    passkeys, pk_notes = trail.finish(sums)
    try:
        lineage = calls.finish_lineage()
    except OutOfOrder:
        lineage = check_lineage_in_memory(pack.lines("lineage.jsonl"), pack.lines("chain.jsonl"))
    return {"manifest": manifest, "kid": sig["kid"], "files": len(manifest["files"]), "checkpoints": len(cps),
            "redeemed": redeemed, "passkeys": passkeys, "lineage": lineage, "notes": notes + pk_notes}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pack")
    ap.add_argument("--audit-key-fingerprint", action="append", default=[],
                    help="SHA-256 (64 hex digits) of the raw audit public key to trust; repeatable")
    ap.add_argument("--checkpoint", action="append", default=[], help="a file of checkpoints you kept; repeatable")
    ap.add_argument("--data", help="a console's data directory: trust its audit-key")
    args = ap.parse_args()
    if ed25519 is None:
        print("SIGNATURES NOT CHECKED: the Python package cryptography is not installed (Debian: apt install python3-cryptography; "
              "or pip install cryptography); nothing was verified", file=sys.stderr)
        return 3
    for fp in args.audit_key_fingerprint:
        if len(fp) != 64 or any(ch not in "0123456789abcdef" for ch in fp):
            ap.error("--audit-key-fingerprint %r is not 64 lowercase hex digits (the whole SHA-256 of the audit key)" % fp)
    try:
        checkpoints = [c for p in args.checkpoint for c in read_checkpoints(p)]
        keys = [data_key(args.data)] if args.data else []
    except (OSError, ValueError) as e:
        print("verify_evidence_pack: %s" % e, file=sys.stderr)
        return 1
    trust = Trust(args.audit_key_fingerprint, checkpoints, keys)
    if trust.empty():
        print("NOT VERIFIED: %s: signed by a key nothing you gave trusts. Give the audit key from outside the pack: "
              "--audit-key-fingerprint HEX, --checkpoint FILE or --data DIR" % args.pack)
        return 1
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from verify_passkey_evidence import verify as passkey_verify
    try:
        r = verify(args.pack, trust, passkey_verify)
    except Untrusted as e:
        print("NOT VERIFIED: %s: signed by a key nothing you gave trusts: %s. Nothing in it was checked further" % (args.pack, e))
        return 1
    except Damage as e:
        print("DAMAGED: %s" % e)
        return 1
    except tarfile.TarError as e:
        print("DAMAGED: the pack is not a readable tar archive: %s" % e)
        return 1
    except (OSError, ValueError, KeyError, TypeError) as e:
        print("DAMAGED: the pack does not read: %s" % e)
        return 1
    m = r["manifest"]
    c = m["chain"]
    print("ok: evidence pack of database %s, made %s, signed by audit key %s" % (m["database"], m["created_at"], r["kid"]))
    print("files: %d, each matches its SHA-256 in the signed manifest" % r["files"])
    print("chain: entries %d to %d (%d) verified, head %s, between %d signed checkpoints" % (c["from_seq"], c["to_seq"], c["count"], c["head"], r["checkpoints"]))
    print("passkeys: %d approval signatures re-verified" % r["passkeys"])
    print("redemptions: %d, each of a digest that was approved" % r["redeemed"])
    print("lineage: %d calls agree with the chain" % r["lineage"])
    for n in r["notes"]:
        print("note: " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
