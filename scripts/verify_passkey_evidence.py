#!/usr/bin/env python3
"""Check one Countersign passkey approval offline, without Countersign.

    python3 scripts/verify_passkey_evidence.py EVIDENCE.json \
        [--call-id ID --digest HEX --operator NAME]

EVIDENCE.json is the "passkey" object of an approval's audit entry
(docs/passkeys.md). Pass the call id, digest and operator from the audit
entry itself to check that the evidence is for that entry; by default the
evidence's own copies are used. Needs only Python 3 and the `cryptography`
package (Debian: python3-cryptography). Exit status 0 when every check
passes, 1 with the failed check on stderr otherwise.
"""

import argparse
import base64
import hashlib
import json
import sys
from urllib.parse import urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

PREFIX = b"countersign/v1/approval:"
FORMAT = "countersign.passkey-approval.v1"


def b64url(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def jcs(obj):
    # RFC 8785 for an object of plain strings with fixed ASCII keys: sorted
    # keys, no white space, minimal escapes, other characters as UTF-8.
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def cbor_item(b, i):
    """Decodes the CBOR item at b[i:]: the integers, byte strings and maps a COSE_Key uses."""
    major, info = b[i] >> 5, b[i] & 0x1F
    i += 1
    if info < 24:
        n = info
    elif info in (24, 25, 26, 27):
        size = 1 << (info - 24)
        n, i = int.from_bytes(b[i:i + size], "big"), i + size
    else:
        raise ValueError("unsupported CBOR length")
    if major == 0:
        return n, i
    if major == 1:
        return -1 - n, i
    if major == 2:
        return bytes(b[i:i + n]), i + n
    if major == 5:
        m = {}
        for _ in range(n):
            k, i = cbor_item(b, i)
            v, i = cbor_item(b, i)
            m[k] = v
        return m, i
    raise ValueError("unsupported CBOR type %d" % major)


def public_key(cose):
    key, end = cbor_item(cose, 0)
    if end != len(cose):
        raise ValueError("trailing bytes after the COSE key")
    kty, alg = key.get(1), key.get(3)
    if kty == 2 and alg == -7 and key.get(-1) == 1:  # EC2, ES256, P-256
        x, y = key[-2], key[-3]
        pub = ec.EllipticCurvePublicNumbers(int.from_bytes(x, "big"), int.from_bytes(y, "big"), ec.SECP256R1()).public_key()
        return lambda sig, data: pub.verify(sig, data, ec.ECDSA(hashes.SHA256()))
    if kty == 1 and alg == -8 and key.get(-1) == 6:  # OKP, EdDSA, Ed25519
        pub = ed25519.Ed25519PublicKey.from_public_bytes(key[-2])
        return lambda sig, data: pub.verify(sig, data)
    raise ValueError("unsupported COSE key (kty %r, alg %r)" % (kty, alg))


def verify(ev, call_id, digest, operator):
    if ev["format"] != FORMAT:
        return "format is %r, want %r" % (ev["format"], FORMAT)
    if (ev["call_id"], ev["digest"], ev["operator"]) != (call_id, digest, operator):
        return "the evidence is for another call, digest or operator"
    rp_id, origin = ev["rp_id"], ev["origin"]
    host = urlsplit(origin).hostname or ""
    if host != rp_id and not host.endswith("." + rp_id):
        return "origin %s is not on the RP ID %s" % (origin, rp_id)

    client_data_json = b64url(ev["client_data_json"])
    client_data = json.loads(client_data_json)
    if client_data.get("type") != "webauthn.get":
        return "client data type is %r, want webauthn.get" % client_data.get("type")
    if client_data.get("origin") != origin:
        return "client data origin %r, want %r" % (client_data.get("origin"), origin)
    if client_data.get("crossOrigin"):
        return "the assertion was made in a cross-origin frame"
    challenge = b64url(client_data["challenge"])
    binding = jcs({"call_id": call_id, "digest": digest, "operator": operator})
    if len(challenge) != 64 or challenge[32:] != hashlib.sha256(PREFIX + binding).digest():
        return "the challenge is not bound to this call, digest and operator"

    auth_data = b64url(ev["authenticator_data"])
    if len(auth_data) < 37:
        return "authenticator data too short"
    if auth_data[:32] != hashlib.sha256(rp_id.encode()).digest():
        return "authenticator data is for another RP ID"
    flags = auth_data[32]
    if not flags & 0x01:
        return "user presence flag not set"
    if not flags & 0x04:
        return "user verification flag not set"
    if int.from_bytes(auth_data[33:37], "big") != ev["sign_count"]:
        return "signature counter differs from sign_count"

    check = public_key(b64url(ev["public_key"]))
    try:
        check(b64url(ev["signature"]), auth_data + hashlib.sha256(client_data_json).digest())
    except InvalidSignature:
        return "the signature does not verify with the public key"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("evidence")
    ap.add_argument("--call-id")
    ap.add_argument("--digest")
    ap.add_argument("--operator")
    args = ap.parse_args()
    with open(args.evidence, encoding="utf-8") as f:
        ev = json.load(f)
    problem = verify(ev, args.call_id or ev["call_id"], args.digest or ev["digest"], args.operator or ev["operator"])
    if problem:
        print("NOT VERIFIED: " + problem, file=sys.stderr)
        return 1
    print("verified: %s approved call %s (digest %s) with passkey %s" % (ev["operator"], ev["call_id"], ev["digest"], ev["credential_name"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
