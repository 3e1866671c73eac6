"""The client against a real `console serve` on 127.0.0.1: the whole loop,
denial, expiry, refused proposals, the retry cap, long-poll wake-up, digest
agreement, and the gated decorator."""

import inspect
import json
import re
import threading
import time
import unittest

import countersign
from countersign import Client, CountersignError, NotApproved, RedemptionRejected, WaitTimeout, gated

from .harness import OPERATOR, Console, in_thread

console: Console


def setUpModule():
    global console
    console = Console()


def tearDownModule():
    console.stop()


_n = 0


def new_client(owners=(), **kwargs) -> Client:
    """A client with a token for an actor of its own, so that retry counts
    and deduplication of one test never meet another's."""
    global _n
    _n += 1
    return Client(console.url, console.token(f"agent:py-{_n}", owners=owners), **kwargs)


REFUND = {"amount_minor": 1299, "currency": "USD", "reason_code": "duplicate"}


class CountingClient(Client):
    """Counts long-polls and hands every submitted call to a queue, so a
    test can decide a call that a gated function proposed."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.polls = 0
        self.submitted: list = []
        self.cv = threading.Condition()

    def _poll(self, call_id, wait):
        self.polls += 1
        return super()._poll(call_id, wait)

    def submit(self, *a, **kw):
        call = super().submit(*a, **kw)
        with self.cv:
            self.submitted.append(call)
            self.cv.notify_all()
        return call

    def next_submitted(self, limit=30.0):
        with self.cv:
            if not self.cv.wait_for(lambda: self.submitted, limit):
                raise AssertionError("nothing was submitted")
            return self.submitted.pop(0)


class WholeLoop(unittest.TestCase):
    def test_submit_wait_redeem_outcome(self):
        c = new_client()
        call = c.submit("payments.refund", "invoice:INV-1042", dict(REFUND, notes="charged twice"),
                        rationale="the customer was charged twice")
        self.assertTrue(call.created)
        self.assertEqual((call.status, call.grant_state), ("pending", ""))
        self.assertRegex(call.digest, r"^[0-9a-f]{64}$")
        self.assertEqual(call.audience, "payments-host")
        self.assertEqual(call.approvals, countersign.Approvals(required=1, received=0))
        self.assertEqual(call.args, dict(REFUND, notes="charged twice"))
        self.assertEqual(call.rationale, "the customer was charged twice")
        self.assertTrue(call.created_at < call.decide_by)
        self.assertEqual(call.grant, "")

        # The digest the console shows is the digest of what was asked for,
        # without the informational notes.
        self.assertEqual(c.verify_digest(call, informational=["/notes"]), call.digest)
        with self.assertRaises(countersign.DigestMismatch) as cm:
            c.verify_digest(call)
        self.assertEqual(cm.exception.code, "digest_mismatch")

        again = c.submit("payments.refund", "invoice:INV-1042", dict(REFUND, notes="charged twice"))
        self.assertFalse(again.created)
        self.assertEqual(again.id, call.id)

        waited = in_thread(c.wait, call.id)
        console.wait_for_waiters(1)
        console.approve(call.id, call.digest)
        approved = waited()
        self.assertEqual(approved.status, "approved")
        self.assertTrue(approved.grant)
        self.assertIsNotNone(approved.grant_expires_at)
        self.assertEqual(approved.grant_state, countersign.GRANT_LIVE)
        self.assertEqual(approved.approvals.received, 1)
        self.assertEqual([(a.by, a.channel, a.method) for a in approved.approvals.given],
                         [(OPERATOR, "cli", countersign.METHOD_COMMAND)])
        self.assertIsNotNone(approved.approvals.given[0].at)
        # A command names a person but proves nothing of what they saw.
        given = approved.approvals.given[0]
        self.assertEqual((given.human, given.digest, given.presented), (countersign.HUMAN_UNATTESTED, call.digest, None))
        self.assertEqual(approved.owners, ())

        # Another call than the approved one is refused and consumes nothing.
        tampered = dict(approved.spec(), args=dict(REFUND, amount_minor=999999))
        r = c.redeem(approved.grant, tampered)
        self.assertEqual((r.accepted, r.reason, r.status_code), (False, "digest_mismatch", 403))
        self.assertEqual(r.failed().name, "digest")

        r = c.redeem(approved.grant, approved)
        self.assertTrue(r.accepted)
        self.assertEqual((r.decision, r.call_id, r.reason), ("accepted", call.id, ""))
        self.assertEqual([(ch.name, ch.ok) for ch in r.checks],
                         [(n, True) for n in ("shape", "signature", "claims", "actor", "audience", "tool", "target",
                                              "digest", "time", "status", "nonce")])

        r = c.redeem(approved.grant, approved)
        self.assertEqual((r.accepted, r.reason, r.status_code), (False, "replayed", 409))
        self.assertTrue(r.message)

        done = c.report_outcome(call.id, "succeeded", "refund re-1042 issued")
        self.assertEqual(done.status, "redeemed")
        self.assertEqual((done.outcome.status, done.outcome.detail), ("succeeded", "refund re-1042 issued"))
        self.assertTrue(done.outcome.at is not None and done.outcome.at >= call.created_at, done.outcome.at)
        with self.assertRaises(CountersignError) as cm:
            c.report_outcome(call.id, "failed")
        self.assertEqual((cm.exception.code, cm.exception.status), ("outcome_already_reported", 409))

        got = c.get(call.id)
        self.assertEqual((got.status, got.grant, got.outcome.status), ("redeemed", "", "succeeded"))
        self.assertEqual(got.grant_state, countersign.GRANT_REDEEMED)
        # The lineage: what was proposed, approved and redeemed is one digest.
        lin = got.lineage
        self.assertEqual([lin.proposed.digest] + [d.digest for d in lin.decided] + [lin.redeemed.digest], [call.digest] * 3)
        self.assertEqual((lin.decided[0].by, lin.decided[0].method, lin.decided[0].human, lin.decided[0].verdict),
                         (OPERATOR, countersign.METHOD_COMMAND, countersign.HUMAN_UNATTESTED, "approved"))
        self.assertTrue(lin.proposed.token.startswith("tok_") and lin.redeemed.token == lin.proposed.token, lin)
        self.assertEqual(lin.outcome.status, "succeeded")

    def test_cancel_and_not_found(self):
        c = new_client()
        call = c.submit("payments.refund", "invoice:INV-7", REFUND)
        self.assertEqual(c.cancel(call.id).status, "cancelled")
        with self.assertRaises(CountersignError) as cm:
            c.cancel(call.id)
        self.assertEqual((cm.exception.code, cm.exception.status), ("not_pending", 409))
        self.assertEqual(c.wait(call.id).status, "cancelled")
        # Another actor's call does not exist for this token.
        with self.assertRaises(CountersignError) as cm:
            new_client().get(call.id)
        self.assertEqual(cm.exception.status, 404)

    def test_bad_token_and_unreachable_console(self):
        with self.assertRaises(CountersignError) as cm:
            Client(console.url, "not-a-token").submit("payments.refund", "invoice:INV-1", REFUND)
        self.assertEqual((cm.exception.status, cm.exception.refusal), (401, False))
        # A port nobody listens on: an error with a code, not a bare OSError.
        dead = Client("http://127.0.0.1:9", "x", max_outage=0.5, backoff=(0.05, 0.1))
        with self.assertRaises(countersign.ConsoleUnreachable) as cm:
            dead.get("call_x")
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.refusal), ("unavailable", None, False))
        with self.assertRaises(countersign.ConsoleUnreachable):
            dead.wait("call_x")

    def test_keys(self):
        jwks = new_client().keys()
        self.assertTrue(jwks["keys"])
        self.assertEqual({(k["kty"], k["crv"]) for k in jwks["keys"]}, {("OKP", "Ed25519")})


class Owners(unittest.TestCase):
    def test_the_call_names_its_agents_owners(self):
        c = new_client(owners=("olga", "team:payments"))
        call = c.submit("payments.refund", "invoice:INV-77", REFUND)
        self.assertEqual(call.owners, ("olga", "team:payments"))
        self.assertEqual(c.get(call.id).owners, ("olga", "team:payments"))


class Decisions(unittest.TestCase):
    def test_denial_with_reason(self):
        c = new_client()
        call = c.submit("payments.refund", "invoice:INV-500", dict(REFUND, amount_minor=500))
        waited = in_thread(c.wait, call.id)
        console.wait_for_waiters(1)
        console.deny(call.id, "this invoice was already refunded")
        denied = waited()
        self.assertEqual(denied.status, "denied")
        self.assertEqual(denied.grant, "")
        self.assertEqual((denied.decision.by, denied.decision.reason), (OPERATOR, "this invoice was already refunded"))
        self.assertIsNotNone(denied.decision.at)

        # The same call again is refused outright, with the operator's reason.
        with self.assertRaises(CountersignError) as cm:
            c.submit("payments.refund", "invoice:INV-500", dict(REFUND, amount_minor=500))
        e = cm.exception
        self.assertEqual((e.code, e.status, e.call_id, e.reason, e.refusal),
                         ("previously_denied", 409, call.id, "this invoice was already refunded", True))

    def test_expiry(self):
        c = new_client()
        call = c.submit("tests.expiring", "expiring:one", {"n": 1})
        start = time.monotonic()
        expired = c.wait(call.id)
        self.assertEqual(expired.status, "expired")
        self.assertLess(time.monotonic() - start, 30, "a call with decide_within 2s expires long before this")
        with self.assertRaises(CountersignError) as cm:
            c.cancel(call.id)
        self.assertEqual(cm.exception.code, "not_pending")

    def test_revocation(self):
        # An approved call whose grant the operator revoked before it was
        # redeemed: the call comes back revoked, with who, why and when,
        # and its grant is refused (revoked).
        c = new_client()
        call = c.submit("payments.refund", "invoice:INV-501", dict(REFUND, amount_minor=501))
        console.approve(call.id, call.digest)
        approved = c.get(call.id)
        self.assertEqual((approved.status, approved.revocation), ("approved", None))
        console.revoke_grant(call.id, "wrong invoice: INV-501 was refunded by hand")
        revoked = c.get(call.id)
        self.assertEqual(revoked.status, countersign.STATUS_REVOKED)
        self.assertEqual(revoked.grant_state, countersign.GRANT_REVOKED)
        self.assertIsInstance(revoked.revocation, countersign.Revocation)
        self.assertEqual((revoked.revocation.by, revoked.revocation.reason),
                         (OPERATOR, "wrong invoice: INV-501 was refunded by hand"))
        self.assertIsNotNone(revoked.revocation.at)
        self.assertEqual(revoked.revocation.at, countersign._client._time(revoked.raw["revocation"]["at"]))
        res = c.redeem(approved.grant, approved)
        self.assertEqual((res.accepted, res.reason), (False, "revoked"))

    def test_wait_timeout_returns_the_last_state(self):
        c = new_client()
        call = c.submit("payments.refund", "invoice:INV-8", REFUND)
        with self.assertRaises(WaitTimeout) as cm:
            c.wait(call.id, timeout=1.0)
        self.assertEqual((cm.exception.code, cm.exception.call.status, cm.exception.refusal), ("wait_timeout", "pending", False))
        c.cancel(call.id)

    def test_long_poll_wakes_on_approval(self):
        # One long-poll of 60 s is open when the operator approves: the wait
        # returns the grant from that very poll, not from a later one.
        c = CountingClient(console.url, console.token("agent:py-longpoll"), poll_wait=60)
        call = c.submit("payments.refund", "invoice:INV-9", REFUND)
        waited = in_thread(c.wait, call.id)
        console.wait_for_waiters(1)
        console.approve(call.id, call.digest)
        approved = waited(limit=50)  # well inside the 60 s poll
        self.assertEqual(approved.status, "approved")
        self.assertTrue(approved.grant)
        self.assertEqual(c.polls, 1, "the approval woke the open long-poll")


class RefusedProposals(unittest.TestCase):
    def test_invalid_arguments(self):
        c = new_client()
        with self.assertRaises(CountersignError) as cm:
            c.submit("payments.refund", "invoice:INV-1",
                     {"amount_minor": 1299, "reason_code": "duplicate", "sql": "DROP TABLE invoices"})
        e = cm.exception
        self.assertEqual((e.code, e.status, e.refusal), ("invalid_arguments", 422, True))
        self.assertTrue(e.has_problem("unknown_field", "/args/sql"))
        self.assertTrue(e.has_problem("missing_field", "/args/currency"))
        self.assertEqual(len(e.problems), 2)
        self.assertTrue(all(p.message for p in e.problems))
        shape = e.to_dict()["error"]
        self.assertEqual(shape["code"], "invalid_arguments")
        self.assertEqual({(p["code"], p["path"]) for p in shape["problems"]},
                         {("unknown_field", "/args/sql"), ("missing_field", "/args/currency")})

    def test_parse_problems(self):
        c = new_client()
        cases = [
            (dict(REFUND, amount_minor=12.99), "float_not_allowed", "/args/amount_minor", 400),
            (dict(REFUND, amount_minor=2**53), "out_of_range", "/args/amount_minor", 400),
            (dict(REFUND, notes="half \ud800 a pair"), "invalid_utf8", "/args/notes", 400),
        ]
        for args, code, path, status in cases:
            with self.subTest(code):
                with self.assertRaises(CountersignError) as cm:
                    c.submit("payments.refund", "invoice:INV-1", args)
                e = cm.exception
                self.assertEqual((e.code, e.status, e.refusal), (code, status, True))
                self.assertEqual([(p.code, p.path) for p in e.problems], [(code, path)])
        with self.assertRaises(CountersignError) as cm:
            c.submit("payments.refund", "invoice:INV-1", {"amount_minor": float("nan")})
        self.assertEqual((cm.exception.code, cm.exception.status), ("malformed_json", None))
        # Three refusals in a row block the pair: a fresh actor for the last.
        with self.assertRaises(CountersignError) as cm:
            new_client().submit_json(b'{"tool":"payments.refund","target":"invoice:INV-1","args":{"a":1,"a":2}}')
        self.assertEqual(cm.exception.code, "duplicate_key")

    def test_unknown_tool_and_audience(self):
        c = new_client()
        with self.assertRaises(CountersignError) as cm:
            c.submit("payments.refund_all", "invoice:INV-1", REFUND)
        # Neither is the model's to fix: the application names the tool and holds the token.
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.refusal), ("unknown_tool", 422, False))
        other = Client(console.url, console.token("agent:py-mail", audience="mail-host"))
        with self.assertRaises(CountersignError) as cm:
            other.submit("payments.refund", "invoice:INV-1", REFUND)
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.refusal), ("audience_not_allowed", 403, False))

    def test_retry_limit(self):
        c = new_client()
        bad = {"amount_minor": 1299, "currency": "USD", "reason_code": "duplicate", "sql": "1"}
        codes = []
        for _ in range(3):
            with self.assertRaises(CountersignError) as cm:
                c.submit("payments.refund", "invoice:INV-1", bad)
            codes.append(cm.exception.code)
        self.assertEqual(codes, ["invalid_arguments"] * 3)
        # The pair is blocked now: even a valid proposal is refused until an
        # operator clears it.
        with self.assertRaises(CountersignError) as cm:
            c.submit("payments.refund", "invoice:INV-1", REFUND)
        e = cm.exception
        self.assertEqual((e.code, e.status, e.refusal), ("retry_limit", 429, True))
        self.assertTrue(e.message)
        # Another tool of the same actor is not blocked.
        self.assertEqual(c.submit("tests.echo", "echo:x", {"text": "hi"}).status, "pending")


class DigestAgreement(unittest.TestCase):
    """Calls the live console hashed, recomputed here."""

    CASES = [
        {"text": "plain"},
        {"text": "café crème 😀 / 2× \u202e <b>&</b> \u2028 \x00\x1f\x7f \"quoted\" \\"},
        {"text": "", "count": -9007199254740991, "flag": None},
        {"text": "e\u0301", "count": 9007199254740991, "flag": True},
        {"text": "\U0001f600\uff61\ue000", "items": [{"qty": 2, "name": "\uff61"}, {"name": "😀"}]},
        {"text": "x", "items": [], "note": "not bound, so not hashed"},
    ]

    def test_live_digests(self):
        c = new_client()
        seen = set()
        for i, args in enumerate(self.CASES):
            with self.subTest(i=i):
                call = c.submit("tests.echo", f"echo:{i}-ü", args)
                local = countersign.digest_of(countersign.envelope(
                    call.actor, call.audience, "tests.echo", f"echo:{i}-ü", countersign.without(args, ["/note"])))
                self.assertEqual(local, call.digest)
                self.assertEqual(c.verify_digest(call, args=args, informational=["/note"]), call.digest)
                seen.add(call.digest)
        self.assertEqual(len(seen), len(self.CASES))


class Gated(unittest.TestCase):
    def test_runs_with_the_redeemed_arguments(self):
        c = CountingClient(console.url, console.token("agent:py-gated"))
        ran = []

        @gated("payments.refund", target=lambda a: f"invoice:{a['invoice']}", client=c,
               rationale=lambda a: f"refund of {a['amount_minor']}")
        def refund(amount_minor, currency, reason_code, **extra):
            ran.append(dict(amount_minor=amount_minor, currency=currency, reason_code=reason_code, **extra))
            return "re_1"

        # invoice is not a parameter of the tool's schema: the target names
        # it, so it must not reach args. Pass it through the target only.
        @gated("payments.refund", target="invoice:INV-77", client=c, verify_digest=True, informational=["/notes"])
        def refund77(amount_minor, currency, reason_code, notes=None):
            ran.append(dict(amount_minor=amount_minor, currency=currency, reason_code=reason_code, notes=notes))
            return "re_77"

        result = in_thread(refund77, 700, "EUR", reason_code="requested", notes="n")
        call = c.next_submitted()
        self.assertEqual((call.target, call.args), ("invoice:INV-77", {"amount_minor": 700, "currency": "EUR",
                                                                        "reason_code": "requested", "notes": "n"}))
        self.assertEqual(ran, [], "nothing runs before approval")
        console.approve(call.id, call.digest)
        self.assertEqual(result(), "re_77")
        self.assertEqual(ran, [{"amount_minor": 700, "currency": "EUR", "reason_code": "requested", "notes": "n"}])
        done = c.get(call.id)
        self.assertEqual((done.status, done.outcome.status), ("redeemed", "succeeded"))
        self.assertEqual(refund77.countersign_tool, "payments.refund")
        self.assertEqual(refund77.__name__, "refund77")

        # A function whose target comes from an argument outside the schema
        # is refused by the console, and the function never runs.
        with self.assertRaises(CountersignError) as cm:
            refund(1, "USD", "fraud", invoice="INV-1")
        self.assertEqual(cm.exception.code, "invalid_arguments")
        self.assertTrue(cm.exception.has_problem("unknown_field", "/args/invoice"))
        self.assertEqual(len(ran), 1)

    def test_denied_expired_and_failed(self):
        c = CountingClient(console.url, console.token("agent:py-gated-2"))
        ran = []

        @gated("payments.refund", target="invoice:INV-88", client=c)
        def refund(amount_minor, currency, reason_code):
            ran.append(amount_minor)
            if amount_minor == 13:
                raise RuntimeError("the payment provider said no")
            return amount_minor

        result = in_thread(refund, 12, "USD", "fraud")
        call = c.next_submitted()
        console.deny(call.id, "not fraud: the customer confirmed the charge")
        with self.assertRaises(NotApproved) as cm:
            result()
        e = cm.exception
        self.assertEqual((e.code, e.reason, e.by, e.call.id), ("denied", "not fraud: the customer confirmed the charge",
                                                                OPERATOR, call.id))
        self.assertIn("not fraud", e.message)
        self.assertTrue(e.refusal)
        self.assertEqual(ran, [])

        result = in_thread(refund, 13, "USD", "fraud")
        call = c.next_submitted()
        console.approve(call.id, call.digest)
        with self.assertRaisesRegex(RuntimeError, "the payment provider said no"):
            result()
        self.assertEqual(ran, [13])
        done = c.get(call.id)
        self.assertEqual(done.outcome.status, "failed")
        self.assertIn("RuntimeError: the payment provider said no", done.outcome.detail)

        @gated("tests.expiring", target="expiring:gated", client=c)
        def never(n):
            ran.append(n)

        with self.assertRaises(NotApproved) as cm:
            never(n=5)
        self.assertEqual(cm.exception.code, "expired")
        self.assertEqual(ran, [13])

    def test_redemption_refused_runs_nothing(self):
        c = CountingClient(console.url, console.token("agent:py-gated-3"))
        ran = []

        @gated("payments.refund", target="invoice:INV-99", client=c)
        def refund(amount_minor, currency, reason_code):
            ran.append(amount_minor)

        # The grant is spent before the decorator presents it.
        result = in_thread(refund, 5, "JPY", "requested")
        call = c.next_submitted()
        real_redeem = c.redeem

        def redeem_twice(grant, spec):
            real_redeem(grant, spec)
            return real_redeem(grant, spec)

        c.redeem = redeem_twice
        console.approve(call.id, call.digest)
        with self.assertRaises(RedemptionRejected) as cm:
            result()
        self.assertEqual((cm.exception.code, cm.exception.redemption.status_code, cm.exception.refusal), ("replayed", 409, True))
        self.assertEqual(ran, [])

    def test_revoked_token_is_not_a_refusal(self):
        # A token revoked while the agent runs: the gated function raises the
        # client's error with the console's code, which says it is not the
        # model's to act on; nothing runs.
        c = CountingClient(console.url, console.token("agent:py-gated-revoked"))
        ran = []

        @gated("payments.refund", target="invoice:INV-98", client=c)
        def refund(amount_minor, currency, reason_code):
            ran.append(amount_minor)

        console.revoke_tokens("agent:py-gated-revoked")
        with self.assertRaises(CountersignError) as cm:
            refund(7, "USD", "duplicate")
        e = cm.exception
        self.assertNotIsInstance(e, NotApproved)
        self.assertEqual((e.code, e.status, e.refusal), ("unauthorized", 401, False))
        self.assertEqual(e.to_dict()["error"]["code"], "unauthorized")
        self.assertEqual(ran, [])

    def test_frozen_redemption_is_an_operational_error(self):
        # An approved call whose actor an operator froze before it was
        # redeemed: the console answers 503 in the redemption's shape; the
        # client raises code frozen with the freeze's reason, not a refusal,
        # and the grant is not consumed.
        actor = "agent:py-frozen"
        c = Client(console.url, console.token(actor))
        call = c.submit("payments.refund", "invoice:INV-97", REFUND)
        waited = in_thread(c.wait, call.id)
        console.wait_for_waiters(1)
        console.approve(call.id, call.digest)
        approved = waited()
        self.assertEqual(approved.status, "approved")
        console.freeze_actor(actor, "incident 7: refunds on hold")
        with self.assertRaises(CountersignError) as cm:
            c.redeem(approved.grant, approved)
        e = cm.exception
        self.assertNotIsInstance(e, RedemptionRejected)
        self.assertEqual((e.code, e.status, e.reason, e.refusal), ("frozen", 503, "incident 7: refunds on hold", False))
        self.assertIn("incident 7: refunds on hold", e.message)
        self.assertIn("frozen", e.message)
        self.assertEqual(e.call_id, call.id)
        self.assertEqual(e.to_dict()["error"]["code"], "frozen")
        self.assertEqual(c.get(call.id).status, "approved")

    def test_refusal_of_each_kind_of_answer(self):
        def answer(status, **error):
            return CountersignError.from_response(status, json.dumps({"error": error}).encode())

        problem = [{"code": "enum_mismatch", "path": "/args/currency", "message": "x"}]
        cases = [
            ("invalid_arguments", answer(422, code="invalid_arguments", message="x", problems=problem), True),
            ("malformed_json", answer(400, code="malformed_json", message="x",
                                      problems=[{"code": "malformed_json", "path": "", "message": "x"}]), True),
            ("too_large", answer(413, code="too_large", message="x"), True),
            ("denied_by_policy", answer(403, code="denied_by_policy", message="x", reason="r"), True),
            ("previously_denied", answer(409, code="previously_denied", message="x", reason="r"), True),
            ("retry_limit", answer(429, code="retry_limit", message="x"), True),
            ("unauthorized", answer(401, code="unauthorized", message="the token is unknown or revoked"), False),
            ("audience_not_allowed", answer(403, code="audience_not_allowed", message="x"), False),
            ("unknown_tool", answer(422, code="unknown_tool", message="x",
                                    problems=[{"code": "unknown_tool", "path": "/tool", "message": "x"}]), False),
            ("too_many_waits", answer(429, code="too_many_waits", message="x"), False),
            ("frozen", answer(503, code="frozen", message="x"), False),
            ("internal", answer(500, code="internal", message="x"), False),
            ("not JSON", CountersignError.from_response(502, b"<html>bad gateway</html>"), False),
            ("nothing sent", CountersignError("unauthorized", "COUNTERSIGN_TOKEN is not set"), False),
        ]
        for name, e, want in cases:
            with self.subTest(name):
                self.assertEqual(e.refusal, want)

    def test_refusal_of_each_rejected_grant(self):
        from countersign._client import Redemption

        def rejected(reason, status=403):
            return RedemptionRejected(Redemption(decision="rejected", accepted=False, call_id="call_x", reason=reason,
                                                 message="x", checks=[], status_code=status))

        for reason in ("tool_mismatch", "target_mismatch", "digest_mismatch", "expired", "revoked", "tool_changed"):
            with self.subTest(reason):
                self.assertTrue(rejected(reason).refusal)
        self.assertTrue(rejected("replayed", 409).refusal)
        for reason in ("actor_mismatch", "audience_mismatch", "unknown_key", "bad_signature", "bad_claims",
                       "not_yet_valid", "malformed", "a_new_reason"):
            with self.subTest(reason):
                self.assertFalse(rejected(reason).refusal)

    def test_signature_rules(self):
        with self.assertRaises(TypeError):
            @gated("payments.refund", target="invoice:INV-1")
            def f(a, /, b):
                pass
        with self.assertRaises(TypeError):
            @gated("payments.refund", target="invoice:INV-1")
            def g(*a):
                pass

    def test_functions_that_would_return_without_running(self):
        # Calling a generator function runs none of its body: refused when
        # it is decorated, with what to do instead.
        def refunds(amount_minor, currency, reason_code):
            yield amount_minor

        async def refunds_async(amount_minor, currency, reason_code):
            yield amount_minor

        class Refunds:
            def __call__(self, amount_minor, currency, reason_code):
                yield amount_minor

        for fn, kind in ((refunds, "a generator"), (refunds_async, "an async generator"), (Refunds(), "a generator")):
            with self.assertRaises(TypeError) as cm:
                gated("payments.refund", target="invoice:INV-1")(fn)
            self.assertIn(f"is {kind} function: calling it runs none of its body", str(cm.exception))

        # A plain function that hands back a coroutine or a generator ran
        # only its own lines: reported unknown, the object closed unrun,
        # and a TypeError says to gate the async function itself.
        c = CountingClient(console.url, console.token("agent:py-gated-unrun"))
        made = []

        async def refund_async(amount_minor, currency, reason_code):
            made.append("ran")

        @gated("payments.refund", target="invoice:INV-31", client=c)
        def refund(amount_minor, currency, reason_code):
            coro = refund_async(amount_minor, currency, reason_code)
            made.append(coro)
            return coro

        @gated("payments.refund", target="invoice:INV-32", client=c)
        def lazy(amount_minor, currency, reason_code):
            gen = (x for x in [amount_minor])
            made.append(gen)
            return gen

        for fn, what in ((refund, "a coroutine"), (lazy, "a generator")):
            made.clear()
            result = in_thread(fn, 31, "USD", "duplicate")
            call = c.next_submitted()
            console.approve(call.id, call.digest)
            with self.assertRaises(TypeError) as cm:
                result()
            self.assertIn(f"returned {what} without running it (it was closed)", str(cm.exception))
            self.assertEqual(len(made), 1, "the wrapped coroutine's body never ran")
            state = (inspect.getcoroutinestate if what == "a coroutine" else inspect.getgeneratorstate)(made[0])
            self.assertIn(state, ("CORO_CLOSED", "GEN_CLOSED"))
            done = c.get(call.id)
            self.assertEqual(done.outcome.status, "unknown")
            self.assertIn(f"returned {what} without running it", done.outcome.detail)

    def test_an_interrupted_function_is_unknown(self):
        c = CountingClient(console.url, console.token("agent:py-gated-interrupted"))

        @gated("payments.refund", target="invoice:INV-41", client=c)
        def refund(amount_minor, currency, reason_code):
            raise KeyboardInterrupt

        result = in_thread(refund, 41, "USD", "duplicate")
        call = c.next_submitted()
        console.approve(call.id, call.digest)
        with self.assertRaises(KeyboardInterrupt):
            result()
        done = c.get(call.id)
        self.assertEqual((done.outcome.status, done.outcome.detail),
                         ("unknown", "interrupted (KeyboardInterrupt) while it ran: it may have done part of its work"))


if __name__ == "__main__":
    unittest.main()
