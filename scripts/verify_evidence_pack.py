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
lineage against the chain (docs/evidence.md).

Needs Python 3 and the `cryptography` package (Debian: python3-cryptography).
Exit status: 0 when every check passes; 1 when the pack is damaged or signed
by a key nothing given trusts; 2 on a usage error; 3 when `cryptography` is
missing, so no signature could be checked (SIGNATURES NOT CHECKED).
"""

import argparse
import base64
import hashlib
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


def read_tar(path):
    files, total = {}, 0
    try:
        with tarfile.open(path, "r:") as tf:
            for m in tf:
                if not m.isreg():
                    raise Damage(m.name, "not a regular file")
                if m.name != posixpath.normpath(m.name) or m.name.startswith(("/", "../")) or m.name == "..":
                    raise Damage(m.name, "not a plain relative file name")
                if m.name in files:
                    raise Damage(m.name, "in the pack twice")
                total += m.size
                if total > MAX_PACK_BYTES:
                    raise Damage("", "the pack is larger than %d bytes" % MAX_PACK_BYTES)
                files[m.name] = tf.extractfile(m).read()
    except tarfile.TarError as e:
        raise Damage("", "the pack is not a readable tar archive: %s" % e)
    return files


def check_manifest(files, trust):
    if "MANIFEST.sig" not in files:
        raise Damage("MANIFEST.sig", "missing: the pack is not signed")
    if "MANIFEST.json" not in files:
        raise Damage("MANIFEST.json", "missing")
    try:
        sig = json.loads(files["MANIFEST.sig"])
        assert set(sig) == {"kid", "public_key", "signature"}
        raw = b64url(sig["public_key"])
        assert len(raw) == 32 and key_id(raw) == sig["kid"]
    except (ValueError, AssertionError, TypeError):
        raise Damage("MANIFEST.sig", "does not read as the audit key and its signature")
    if not trust.trusts(sig["public_key"]):
        raise Untrusted("the manifest is signed by audit key %s (fingerprint %s)" % (sig["kid"], hashlib.sha256(raw).hexdigest()))
    manifest_raw = files["MANIFEST.json"]
    if not ed_verify(sig["public_key"], sig["signature"], MANIFEST_PREFIX + manifest_raw):
        raise Damage("MANIFEST.json", "its signature does not verify (the manifest was altered or swapped)")
    m = json.loads(manifest_raw)
    if m.get("format") != FORMAT:
        raise Damage("MANIFEST.json", "format %r, want %r" % (m.get("format"), FORMAT))
    listed = set()
    for f in m["files"]:
        b = files.get(f["name"])
        if b is None:
            raise Damage(f["name"], "listed in the manifest but not in the pack")
        if hashlib.sha256(b).hexdigest() != f["sha256"] or len(b) != f["size"]:
            raise Damage(f["name"], "its SHA-256 differs from the manifest's (the file was altered)")
        listed.add(f["name"])
    for name in sorted(files):
        if name not in listed and name not in ("MANIFEST.json", "MANIFEST.sig"):
            raise Damage(name, "in the pack but not in the manifest (a file was added)")
    try:
        ak = json.loads(files["keys/audit.json"])
    except (KeyError, ValueError):
        ak = {}
    if ak.get("public_key") != sig["public_key"]:
        raise Damage("keys/audit.json", "does not name the key that signed the manifest")
    return m, sig


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


def check_chain(raw, trust, manifest):
    """Returns the header, checkpoints, checkpoint lines and entries of a chain that verified."""
    where = "chain.jsonl"
    lines = raw.split(b"\n")
    if lines[-1] != b"":
        raise Damage(where, "does not end with a newline (the file was cut short)")
    lines = lines[:-1]
    header, cps, cp_lines, entries = None, [], [], []
    prev, hashes = None, {}
    for n, line in enumerate(lines, 1):
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
            check_checkpoint(v["checkpoint"], trust, where)
            cps.append(v["checkpoint"])
            cp_lines.append(line + b"\n")
            continue
        if set(v) != ENTRY_FIELDS:
            raise Damage(where, "line %d is not an entry" % n)
        want_seq = header["from_seq"] if prev is None else prev["seq"] + 1
        if v["seq"] != want_seq:
            raise Damage(where, "expected entry %d, found %d (an entry is missing or out of order)" % (want_seq, v["seq"]), want_seq)
        want_prev = header["prev_hash"] if prev is None else prev["hash"]
        if v["prev_hash"] != want_prev:
            raise Damage(where, "prev_hash does not match the previous entry's hash", v["seq"])
        body = {k: v[k] for k in ENTRY_FIELDS if k != "hash"}
        if hashlib.sha256(bytes.fromhex(v["prev_hash"]) + jcs(body)).hexdigest() != v["hash"]:
            raise Damage(where, "hash does not match the entry's contents (the entry was altered)", v["seq"])
        entries.append(v)
        hashes[v["seq"]] = v["hash"]
        prev = v
    if header is None or not entries:
        raise Damage(where, "holds no entry")
    last = entries[-1]
    if last["seq"] < header["to_seq"]:
        raise Damage(where, "the export ends at entry %d but its header says it runs to entry %d (lines were removed from the end)"
                     % (last["seq"], header["to_seq"]), last["seq"] + 1)
    if last["seq"] > header["to_seq"] or header["count"] != len(entries) or header["head"] != last["hash"]:
        raise Damage(where, "the entries differ from the header's range, count or head")
    for c in cps:
        if c["seq"] == header["from_seq"] - 1:
            continue  # vouches for the first entry's prev_hash, checked below
        if hashes.get(c["seq"]) != c["head"]:
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
        if c["seq"] in hashes:
            if hashes[c["seq"]] != c["head"]:
                raise Damage(where, "differs from the checkpoint you kept at this entry", c["seq"])
        elif c["seq"] > header["to_seq"]:
            notes.append("the checkpoint you gave at entry %d was signed after the period and was not compared" % c["seq"])
        else:
            notes.append("the checkpoint you gave at entry %d falls outside the section and was not compared" % c["seq"])
    return header, cps, cp_lines, entries, notes


def check_passkeys(entries, files, passkey_verify):
    """Re-verifies every passkey approval; the derived files must equal the pack's."""
    keys, removed, verified, pending = {}, {}, 0, []
    key_lines, ev_lines = [], []
    for e in entries:
        d = json.loads(jcs(e["details"]))
        if e["kind"] == "pruned":
            # The passkeys live when older entries were removed: they settle
            # the approvals whose registration was removed (docs/audit.md §6).
            live = {p["credential_id"]: (p["user"], p["public_key"]) for p in d.get("snapshot", {}).get("passkeys", [])}
            still = []
            for seq, cred, key, user in pending:
                if cred not in live:
                    still.append((seq, cred, key, user))
                elif b64url(live[cred][1]) != b64url(key):
                    raise Damage("chain.jsonl", "the passkey that signed entry %d has another public key in this pruned entry's snapshot" % seq, e["seq"])
                elif live[cred][0] != user:
                    raise Damage("chain.jsonl", "the passkey that signed entry %d is registered to %s in this pruned entry's snapshot, not to %s"
                                 % (seq, live[cred][0], user), e["seq"])
            pending = still
            for cred, reg in live.items():
                if cred not in keys and cred not in removed:
                    keys[cred] = reg
        elif e["kind"] == "passkey_registered":
            keys[d["credential_id"]] = (d.get("user") or e["principal"], d.get("public_key"))
            removed.pop(d["credential_id"], None)
            key_lines.append(jcs({"seq": e["seq"], "hash": e["hash"], "user": d.get("user"), "credential_id": d.get("credential_id"),
                                  "name": d.get("name"), "public_key": d.get("public_key")}) + b"\n")
        elif e["kind"] == "passkey_removed":
            keys.pop(d["credential_id"], None)
            removed[d["credential_id"]] = e["seq"]
        elif e["kind"] == "approved" and d.get("method") == "passkey":
            ev = d.get("evidence")
            ev_lines.append(jcs({"seq": e["seq"], "hash": e["hash"], "call_id": e["call_id"], "operator": e["principal"],
                                 "digest": d.get("digest"), "evidence": ev}) + b"\n")
            problem = passkey_verify(ev, e["call_id"], d.get("digest"), e["principal"])
            if problem:
                raise Damage("chain.jsonl", "the passkey signature of this approval does not verify: " + problem, e["seq"])
            cred = ev.get("credential_id")
            if cred in removed:
                raise Damage("chain.jsonl", "the passkey that signed this approval was removed at entry %d, before it" % removed[cred], e["seq"])
            if cred not in keys:
                pending.append((e["seq"], cred, ev["public_key"], e["principal"]))
            else:
                user, key = keys[cred]
                if b64url(key) != b64url(ev["public_key"]):
                    raise Damage("chain.jsonl", "the passkey that signed this approval is not the one registered (another public key)", e["seq"])
                if user != e["principal"]:
                    raise Damage("chain.jsonl", "the passkey that signed this approval is registered to %s, not to %s" % (user, e["principal"]), e["seq"])
            verified += 1
    notes = ["the passkey that signed entry %d was registered before the section: its signature verified, "
             "its key was not compared with its registration" % seq for seq, _, _, _ in pending]
    if b"".join(key_lines) != files.get("keys/passkeys.jsonl", b""):
        raise Damage("keys/passkeys.jsonl", "differs from the passkey registrations in the chain")
    if b"".join(ev_lines) != files.get("passkey-evidence.jsonl", b""):
        raise Damage("passkey-evidence.jsonl", "differs from the passkey evidence the chain's approvals hold")
    return verified, notes


def check_redeemed(entries):
    approved, n = {}, 0
    for e in entries:
        d = e["details"]
        if e["kind"] == "approved":
            approved.setdefault(e["call_id"], []).append(d.get("digest"))
        elif e["kind"] == "redeemed":
            if not approved.get(e["call_id"]):
                raise Damage("chain.jsonl", "the call was redeemed, but no approval of it is in the chain section", e["seq"])
            if d.get("digest") not in approved[e["call_id"]]:
                raise Damage("chain.jsonl", "the redeemed digest %s is not a digest any approval of the call approved" % d.get("digest"), e["seq"])
            n += 1
    return n


def check_lineage(raw, entries):
    submitted, redeemed, approved = {}, {}, {}
    for e in entries:
        d = e["details"]
        if e["kind"] == "submitted":
            submitted[e["call_id"]] = d.get("digest")
        elif e["kind"] == "redeemed":
            redeemed[e["call_id"]] = d.get("digest")
        elif e["kind"] == "approved":
            approved.setdefault(e["call_id"], []).append(d.get("digest"))
    n = 0
    for i, line in enumerate(raw.split(b"\n"), 1):
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
    files = read_tar(path)
    manifest, sig = check_manifest(files, trust)
    header, cps, cp_lines, entries, notes = check_chain(files["chain.jsonl"], trust, manifest)
    redeemed = check_redeemed(entries)
    if b"".join(cp_lines) != files.get("checkpoints.jsonl", b""):
        raise Damage("checkpoints.jsonl", "differs from the checkpoints in the chain")
    passkeys, pk_notes = check_passkeys(entries, files, passkey_verify)
    lineage = check_lineage(files.get("lineage.jsonl", b""), entries)
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
