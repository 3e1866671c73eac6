// The client against a real `console serve` on 127.0.0.1: the whole loop,
// denial, expiry, refused proposals, the retry cap, long-poll wake-up,
// digest agreement, and gated().
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  Client,
  ConsoleUnreachable,
  CountersignError,
  DigestMismatch,
  NotApprovedError,
  RedemptionRejectedError,
  WaitTimeoutError,
  digestOf,
  envelope,
  gated,
  specOf,
  without,
  type GrantState,
  type JsonObject,
  type Revocation,
  type Status,
  type Submitted,
} from '../src/index.js';
import { Console, OPERATOR, within } from './harness.js';

let cs: Console;
before(async () => {
  cs = await Console.start();
});
after(async () => {
  await cs.stop();
});

let n = 0;
/** A client with a token for an actor of its own, so that retry counts and
 * deduplication of one test never meet another's. */
const newClient = (options = {}) => new Client(cs.url, cs.token(`agent:ts-${++n}`), options);

const REFUND = { amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' };

async function rejects(p: Promise<unknown>): Promise<CountersignError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof CountersignError, String(e));
    return e;
  }
  assert.fail('did not throw');
}

/** A client that queues every call it submits, so a test can decide a
 * call that a gated function proposed; countPolls counts its long-polls. */
class CountingClient extends Client {
  polls = 0;
  private submitted: Submitted[] = [];
  private waiting: Array<(c: Submitted) => void> = [];
  override async submit(...a: Parameters<Client['submit']>): Promise<Submitted> {
    const call = await super.submit(...a);
    const w = this.waiting.shift();
    if (w) w(call);
    else this.submitted.push(call);
    return call;
  }
  nextSubmitted(): Promise<Submitted> {
    const c = this.submitted.shift();
    if (c) return Promise.resolve(c);
    return within(new Promise<Submitted>((r) => this.waiting.push(r)), 30_000, 'a submission');
  }
}

function countPolls(c: CountingClient): void {
  const f = (c as unknown as { fetch: typeof fetch }).fetch;
  (c as unknown as { fetch: typeof fetch }).fetch = (input, init) => {
    if (String(input).includes('?wait=')) c.polls++;
    return f(input, init);
  };
}

test('submit, wait, redeem, report the outcome', async () => {
  const c = newClient();
  const call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-1042', args: { ...REFUND, notes: 'charged twice' }, rationale: 'charged twice' });
  assert.equal(call.created, true);
  assert.deepEqual([call.status, call.grant_state], ['pending', undefined]);
  assert.match(call.digest, /^[0-9a-f]{64}$/);
  assert.equal(call.audience, 'payments-host');
  assert.deepEqual(call.approvals, { required: 1, received: 0 });
  assert.deepEqual(call.args, { ...REFUND, notes: 'charged twice' });
  assert.ok(Date.parse(call.created_at) < Date.parse(call.decide_by));
  assert.equal(call.grant, undefined);

  // The console's digest is the digest of what was asked for, without the informational notes.
  assert.equal(c.verifyDigest(call, { informational: ['/notes'] }), call.digest);
  assert.throws(() => c.verifyDigest(call), DigestMismatch);

  const again = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-1042', args: { ...REFUND, notes: 'charged twice' } });
  assert.equal(again.created, false);
  assert.equal(again.id, call.id);

  const waited = c.wait(call.id);
  await cs.waitForWaiters(1);
  cs.approve(call.id, call.digest);
  const approved = await within(waited, 30_000, 'wait');
  assert.equal(approved.status, 'approved');
  assert.ok(approved.grant && approved.grant_expires_at);
  const live: GrantState = 'live';
  assert.equal(approved.grant_state, live);
  assert.equal(approved.approvals.received, 1);
  assert.deepEqual(approved.approvals.given?.map((a) => [a.by, a.channel, a.method]), [[OPERATOR, 'cli', 'command']]);
  assert.ok(!Number.isNaN(Date.parse(approved.approvals.given?.[0]?.at ?? '')));
  // A command names a person but proves nothing of what they saw.
  const given = approved.approvals.given?.[0];
  assert.deepEqual([given?.human, given?.digest, given?.presented], ['unattested', call.digest, undefined]);
  assert.equal(approved.owners, undefined);

  // Another call than the approved one is refused and consumes nothing.
  let r = await c.redeem(approved.grant, { ...specOf(approved), args: { ...REFUND, amount_minor: 999999 } });
  assert.deepEqual([r.accepted, r.reason, r.statusCode], [false, 'digest_mismatch', 403]);
  assert.equal(r.checks.find((ch) => ch.ok === false)?.name, 'digest');

  r = await c.redeem(approved.grant, specOf(approved));
  assert.equal(r.accepted, true);
  assert.deepEqual([r.decision, r.call_id], ['accepted', call.id]);
  assert.deepEqual(
    r.checks.map((ch) => [ch.name, ch.ok]),
    ['shape', 'signature', 'claims', 'actor', 'audience', 'tool', 'target', 'digest', 'time', 'status', 'nonce'].map((n) => [n, true]),
  );
  r = await c.redeem(approved.grant, specOf(approved));
  assert.deepEqual([r.accepted, r.reason, r.statusCode], [false, 'replayed', 409]);
  assert.ok(r.message);

  const done = await c.reportOutcome(call.id, 'succeeded', 'refund re-1042 issued');
  assert.equal(done.status, 'redeemed');
  const { at, ...reported } = done.outcome ?? { status: '' };
  assert.deepEqual(reported, { status: 'succeeded', detail: 'refund re-1042 issued' });
  assert.ok(at !== undefined && Date.parse(at) >= Date.parse(call.created_at), `outcome time ${at}`);
  const e = await rejects(c.reportOutcome(call.id, 'failed'));
  assert.deepEqual([e.code, e.status], ['outcome_already_reported', 409]);
  const got = await c.get(call.id);
  assert.deepEqual([got.status, got.grant, got.outcome?.status], ['redeemed', undefined, 'succeeded']);
  assert.equal(got.grant_state, 'redeemed');
  // The lineage: what was proposed, approved and redeemed is one digest.
  const lin = got.lineage;
  assert.deepEqual([lin.proposed.digest, ...(lin.decided ?? []).map((d) => d.digest), lin.redeemed?.digest], [call.digest, call.digest, call.digest]);
  const decided = lin.decided?.[0];
  assert.deepEqual([decided?.by, decided?.method, decided?.human, decided?.verdict], [OPERATOR, 'command', 'unattested', 'approved']);
  assert.ok(lin.proposed.token?.startsWith('tok_') && lin.redeemed?.token === lin.proposed.token);
  assert.equal(lin.outcome?.status, 'succeeded');
});

test('a redemption refused by a freeze throws frozen, an operational error', async () => {
  // An approved call whose actor an operator froze before it was redeemed:
  // the console answers 503 in the redemption's shape; the client throws
  // code frozen with the freeze's reason, not a refusal, and the grant is
  // not consumed.
  const actor = 'agent:ts-frozen';
  const c = new Client(cs.url, cs.token(actor));
  const call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-97', args: REFUND });
  const waited = c.wait(call.id);
  await cs.waitForWaiters(1);
  cs.approve(call.id, call.digest);
  const approved = await within(waited, 30_000, 'wait');
  assert.equal(approved.status, 'approved');
  cs.freezeActor(actor, 'incident 7: refunds on hold');
  const e = await rejects(c.redeem(approved.grant!, specOf(approved)));
  assert.ok(!(e instanceof RedemptionRejectedError));
  assert.deepEqual([e.code, e.status, e.reason, e.refusal], ['frozen', 503, 'incident 7: refunds on hold', false]);
  assert.match(e.message, /frozen/);
  assert.match(e.message, /incident 7: refunds on hold/);
  assert.equal(e.callId, call.id);
  assert.equal(e.toJSON().error.code, 'frozen');
  assert.equal((await c.get(call.id)).status, 'approved');
});

test("the call names its agent's owners", async () => {
  const c = new Client(cs.url, cs.token(`agent:ts-${++n}`, 'payments-host', ['olga', 'team:payments']));
  const call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-77', args: REFUND });
  assert.deepEqual(call.owners, ['olga', 'team:payments']);
  assert.deepEqual((await c.get(call.id)).owners, ['olga', 'team:payments']);
});

test('cancel, another actor, a bad token, an unreachable console, the key set', async () => {
  const c = newClient();
  const call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-7', args: REFUND });
  let e = await rejects(c.accept(call.id));
  assert.deepEqual([e.code, e.status], ['not_a_counter', 409]);
  assert.equal((await c.cancel(call.id)).status, 'cancelled');
  e = await rejects(c.cancel(call.id));
  assert.deepEqual([e.code, e.status], ['not_pending', 409]);
  assert.equal((await c.wait(call.id)).status, 'cancelled');
  e = await rejects(newClient().get(call.id));
  assert.equal(e.status, 404);
  e = await rejects(new Client(cs.url, 'not-a-token').submit({ tool: 'payments.refund', target: 'invoice:INV-1', args: REFUND }));
  assert.equal(e.status, 401);
  const dead = new Client('http://127.0.0.1:9', 'x', { maxOutageMs: 500, backoffMs: [50, 100] });
  e = await rejects(dead.get('call_x'));
  assert.ok(e instanceof ConsoleUnreachable);
  assert.deepEqual([e.code, e.status], ['unavailable', undefined]);
  assert.ok((await rejects(dead.wait('call_x'))) instanceof ConsoleUnreachable);
  const jwks = await c.keys();
  assert.ok(jwks.keys.length > 0 && jwks.keys.every((k) => k.kty === 'OKP' && k.crv === 'Ed25519'));
});

test('a denial reaches wait with the reason', async () => {
  const c = newClient();
  const args = { ...REFUND, amount_minor: 500 };
  const call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-500', args });
  const waited = c.wait(call.id);
  await cs.waitForWaiters(1);
  cs.deny(call.id, 'this invoice was already refunded');
  const denied = await within(waited, 30_000, 'wait');
  assert.equal(denied.status, 'denied');
  assert.equal(denied.grant, undefined);
  assert.deepEqual([denied.decision?.by, denied.decision?.reason], [OPERATOR, 'this invoice was already refunded']);
  const e = await rejects(c.submit({ tool: 'payments.refund', target: 'invoice:INV-500', args }));
  assert.deepEqual([e.code, e.status, e.callId, e.reason], ['previously_denied', 409, call.id, 'this invoice was already refunded']);
});

test('a revoked grant: the call is revoked, with who, why and when, and the grant is refused', async () => {
  const c = newClient();
  const call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-501', args: { ...REFUND, amount_minor: 501 } });
  cs.approve(call.id, call.digest);
  const approved = await c.get(call.id);
  assert.deepEqual([approved.status, approved.revocation], ['approved', undefined]);
  await cs.revokeGrant(call.id, 'wrong invoice: INV-501 was refunded by hand');
  const revoked = await c.get(call.id);
  const status: Status = 'revoked';
  assert.equal(revoked.status, status);
  assert.equal(revoked.grant_state, 'revoked');
  const r: Revocation | undefined = revoked.revocation;
  assert.deepEqual([r?.by, r?.reason], [OPERATOR, 'wrong invoice: INV-501 was refunded by hand']);
  assert.ok(r && !Number.isNaN(Date.parse(r.at)), `revocation.at=${r?.at}`);
  const res = await c.redeem(approved.grant!, specOf(approved));
  assert.deepEqual([res.accepted, res.reason], [false, 'revoked']);
});

test('a call nobody decides expires', async () => {
  const c = newClient();
  const call = await c.submit({ tool: 'tests.expiring', target: 'expiring:one', args: { n: 1 } });
  const expired = await within(c.wait(call.id), 30_000, 'wait for a call with decide_within 2s');
  assert.equal(expired.status, 'expired');
  const e = await rejects(c.wait((await c.submit({ tool: 'payments.refund', target: 'invoice:INV-8', args: REFUND })).id, { timeoutMs: 1000 }));
  assert.ok(e instanceof WaitTimeoutError);
  assert.deepEqual([e.code, e.call.status], ['wait_timeout', 'pending']);
});

test('the approval wakes the open long-poll', async () => {
  // One long-poll of 60 s is open when the operator approves: the wait
  // returns the grant from that very poll, not from a later one.
  const c = new CountingClient(cs.url, cs.token('agent:ts-longpoll'), { pollWaitMs: 60_000 });
  countPolls(c);
  const call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-9', args: REFUND });
  const waited = c.wait(call.id);
  await cs.waitForWaiters(1);
  cs.approve(call.id, call.digest);
  const approved = await within(waited, 50_000, 'wait'); // well inside the 60 s poll
  assert.equal(approved.status, 'approved');
  assert.ok(approved.grant);
  assert.equal(c.polls, 1, 'the approval woke the open long-poll');
});

test('refused proposals carry the code and every problem', async () => {
  const c = newClient();
  let e = await rejects(c.submit({ tool: 'payments.refund', target: 'invoice:INV-1', args: { amount_minor: 1299, reason_code: 'duplicate', sql: 'DROP TABLE invoices' } }));
  assert.deepEqual([e.code, e.status], ['invalid_arguments', 422]);
  assert.ok(e.hasProblem('unknown_field', '/args/sql') && e.hasProblem('missing_field', '/args/currency'));
  assert.equal(e.problems.length, 2);
  const shape = JSON.parse(JSON.stringify(e)) as { error: { code: string; problems: Array<{ code: string; path: string }> } };
  assert.equal(shape.error.code, 'invalid_arguments');
  assert.deepEqual(shape.error.problems.map((p) => p.path).sort(), ['/args/currency', '/args/sql']);

  for (const [args, code, path] of [
    [{ ...REFUND, amount_minor: 12.99 }, 'float_not_allowed', '/args/amount_minor'],
    [{ ...REFUND, amount_minor: 2 ** 53 }, 'out_of_range', '/args/amount_minor'],
    [{ ...REFUND, notes: 'half \ud800 a pair' }, 'invalid_utf8', '/args/notes'],
  ] as Array<[JsonObject, string, string]>) {
    const c2 = newClient();
    e = await rejects(c2.submit({ tool: 'payments.refund', target: 'invoice:INV-1', args }));
    assert.deepEqual([e.code, e.status, e.problems.map((p) => `${p.code} ${p.path}`)], [code, 400, [`${code} ${path}`]]);
  }
  e = await rejects(c.submit({ tool: 'payments.refund', target: 'invoice:INV-1', args: { amount_minor: NaN } }));
  assert.deepEqual([e.code, e.status], ['malformed_json', undefined]);
  e = await rejects(newClient().submitJSON('{"tool":"payments.refund","target":"invoice:INV-1","args":{"a":1,"a":2}}'));
  assert.equal(e.code, 'duplicate_key');
  e = await rejects(newClient().submit({ tool: 'payments.refund_all', target: 'invoice:INV-1', args: REFUND }));
  assert.deepEqual([e.code, e.status], ['unknown_tool', 422]);
  e = await rejects(new Client(cs.url, cs.token('agent:ts-mail', 'mail-host')).submit({ tool: 'payments.refund', target: 'invoice:INV-1', args: REFUND }));
  assert.deepEqual([e.code, e.status], ['audience_not_allowed', 403]);
});

test('three refusals in a row block the pair with retry_limit', async () => {
  const c = newClient();
  const bad = { ...REFUND, sql: '1' };
  for (let i = 0; i < 3; i++) assert.equal((await rejects(c.submit({ tool: 'payments.refund', target: 'invoice:INV-1', args: bad }))).code, 'invalid_arguments');
  const e = await rejects(c.submit({ tool: 'payments.refund', target: 'invoice:INV-1', args: REFUND }));
  assert.deepEqual([e.code, e.status], ['retry_limit', 429]);
  assert.ok(e.message);
  assert.equal((await c.submit({ tool: 'tests.echo', target: 'echo:x', args: { text: 'hi' } })).status, 'pending');
});

test('digests the live console computed, recomputed here', async () => {
  const c = newClient();
  const cases: JsonObject[] = [
    { text: 'plain' },
    { text: 'café crème 😀 / 2× \u202e <b>&</b> \u2028 \u0000\u001f\u007f "quoted" \\' },
    { text: '', count: -9007199254740991, flag: null },
    { text: 'e\u0301', count: 9007199254740991, flag: true },
    { text: '\u{1f600}\uff61\ue000', items: [{ qty: 2, name: '\uff61' }, { name: '😀' }] },
    { text: 'x', items: [], note: 'not bound, so not hashed' },
  ];
  const seen = new Set<string>();
  for (const [i, args] of cases.entries()) {
    const target = `echo:${i}-ü`;
    const call = await c.submit({ tool: 'tests.echo', target, args });
    assert.equal(digestOf(envelope(call.actor, call.audience, 'tests.echo', target, without(args, ['/note']))), call.digest, String(i));
    assert.equal(c.verifyDigest(call, { args, informational: ['/note'] }), call.digest);
    seen.add(call.digest);
  }
  assert.equal(seen.size, cases.length);
});

test('gated runs the function with the redeemed arguments, and only then', async () => {
  const c = new CountingClient(cs.url, cs.token('agent:ts-gated'));
  const ran: JsonObject[] = [];
  const refund = gated(
    { tool: 'payments.refund', target: 'invoice:INV-77', client: c, verifyDigest: true, informational: ['/notes'], rationale: (a) => `refund of ${a.amount_minor}` },
    async (a: { amount_minor: number; currency: string; reason_code: string; notes?: string }) => {
      ran.push(a);
      if (a.amount_minor === 13) throw new Error('the payment provider said no');
      return 're_77';
    },
  );
  const result = refund({ amount_minor: 700, currency: 'EUR', reason_code: 'requested', notes: 'n' });
  let call = await c.nextSubmitted();
  assert.deepEqual([call.target, call.args, call.rationale], ['invoice:INV-77', { amount_minor: 700, currency: 'EUR', reason_code: 'requested', notes: 'n' }, 'refund of 700']);
  assert.equal(ran.length, 0, 'nothing runs before approval');
  cs.approve(call.id, call.digest);
  assert.equal(await within(result, 30_000, 'gated'), 're_77');
  assert.deepEqual(ran[0], { amount_minor: 700, currency: 'EUR', reason_code: 'requested', notes: 'n' });
  assert.equal(ran.length, 1);
  assert.equal((await c.get(call.id)).outcome?.status, 'succeeded');

  // A failure is reported and thrown again.
  const failing = refund({ amount_minor: 13, currency: 'USD', reason_code: 'fraud' });
  call = await c.nextSubmitted();
  cs.approve(call.id, call.digest);
  await assert.rejects(within(failing, 30_000, 'gated'), /the payment provider said no/);
  const done = await c.get(call.id);
  assert.equal(done.outcome?.status, 'failed');
  assert.match(done.outcome?.detail ?? '', /Error: the payment provider said no/);

  // A denial throws with the operator's reason; nothing runs.
  const denied = refund({ amount_minor: 12, currency: 'USD', reason_code: 'fraud' });
  call = await c.nextSubmitted();
  cs.deny(call.id, 'not fraud: the customer confirmed the charge');
  const e = await rejects(within(denied, 30_000, 'gated'));
  assert.ok(e instanceof NotApprovedError);
  assert.deepEqual([e.code, e.reason, e.by, e.call.id], ['denied', 'not fraud: the customer confirmed the charge', OPERATOR, call.id]);
  assert.equal(ran.length, 2);

  // Expiry, and a refused proposal, run nothing either.
  const never = gated({ tool: 'tests.expiring', target: 'expiring:gated', client: c }, (a: { n: number }) => ran.push(a));
  assert.equal((await rejects(never({ n: 5 }))).code, 'expired');
  const wrong = gated({ tool: 'payments.refund', target: (a) => `invoice:${a.invoice}`, client: c }, (a: JsonObject) => ran.push(a));
  const refusedErr = await rejects(wrong({ invoice: 'INV-1', amount_minor: 1, currency: 'USD', reason_code: 'fraud' }));
  assert.ok(refusedErr.hasProblem('unknown_field', '/args/invoice'));
  assert.equal(ran.length, 2);
});

test('gated runs nothing when the redemption is refused', async () => {
  const c = new CountingClient(cs.url, cs.token('agent:ts-gated-2'));
  const ran: unknown[] = [];
  const refund = gated({ tool: 'payments.refund', target: 'invoice:INV-99', client: c }, (a: JsonObject) => ran.push(a));
  const result = refund({ amount_minor: 5, currency: 'JPY', reason_code: 'requested' });
  const call = await c.nextSubmitted();
  // The grant is spent before gated presents it.
  const realRedeem = c.redeem.bind(c);
  c.redeem = async (grant, spec, signal) => {
    await realRedeem(grant, spec, signal);
    return realRedeem(grant, spec, signal);
  };
  cs.approve(call.id, call.digest);
  const e = await rejects(within(result, 30_000, 'gated'));
  assert.ok(e instanceof RedemptionRejectedError);
  assert.deepEqual([e.code, e.redemption.statusCode], ['replayed', 409]);
  assert.deepEqual(ran, []);
});

test('gated: an abort while the function runs is unknown, while redeeming is failed with nothing run, while waiting runs nothing', async () => {
  const c = new CountingClient(cs.url, cs.token('agent:ts-gated-abort'));
  const ran: string[] = [];
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const job = gated({ tool: 'tests.echo', target: 'echo:aborted', client: c }, (a: { text: string }, signal?: AbortSignal) => {
    ran.push(a.text);
    started();
    // Works until told to stop, as a tool that honours the signal does.
    return new Promise<string>((_, reject) => signal!.addEventListener('abort', () => reject(signal!.reason), { once: true }));
  });

  // While it runs: the function stops partway, so nobody knows what it did.
  let ctrl = new AbortController();
  let result = job({ text: 'running' }, ctrl.signal);
  let call = await c.nextSubmitted();
  cs.approve(call.id, call.digest);
  await within(running, 30_000, 'the function to start');
  ctrl.abort(new Error('the user stopped the run'));
  await assert.rejects(within(result, 30_000, 'gated'), /the user stopped the run/);
  let done = await c.get(call.id);
  assert.deepEqual([done.status, done.outcome?.status, done.outcome?.detail], ['redeemed', 'unknown', 'aborted while it ran: it may have done part of its work']);

  // While redeeming: the redemption's answer is read, the function does
  // not run, and the accepted redemption is reported.
  let redeemed!: () => void;
  const atRedemption = new Promise<void>((r) => (redeemed = r));
  let release!: () => void;
  const released = new Promise<void>((r) => (release = r));
  const realRedeem = c.redeem.bind(c);
  c.redeem = async (grant, spec, signal) => {
    const r = await realRedeem(grant, spec, signal);
    redeemed();
    await released;
    return r;
  };
  ctrl = new AbortController();
  result = job({ text: 'redeeming' }, ctrl.signal);
  call = await c.nextSubmitted();
  cs.approve(call.id, call.digest);
  await within(atRedemption, 30_000, 'the redemption');
  ctrl.abort(new Error('stopped at the redemption'));
  release();
  await assert.rejects(within(result, 30_000, 'gated'), /stopped at the redemption/);
  done = await c.get(call.id);
  assert.deepEqual([done.status, done.outcome?.status, done.outcome?.detail], ['redeemed', 'failed', 'aborted before it ran: nothing was run']);
  c.redeem = realRedeem;

  // While waiting: nothing runs, and the call stays pending.
  ctrl = new AbortController();
  result = job({ text: 'waiting' }, ctrl.signal);
  call = await c.nextSubmitted();
  ctrl.abort(new Error('stopped waiting'));
  await assert.rejects(within(result, 30_000, 'gated'), /stopped waiting/);
  assert.equal((await c.get(call.id)).status, 'pending');
  cs.approve(call.id, call.digest);
  const got = await c.get(call.id);
  assert.deepEqual([got.status, got.outcome], ['approved', undefined]);
  assert.deepEqual(ran, ['running']);
});

test('gated refuses generator functions, and a function that returns a generator is unknown', async () => {
  function* refunds(a: JsonObject) {
    yield a;
  }
  async function* refundsAsync(a: JsonObject) {
    yield a;
  }
  for (const fn of [refunds, refundsAsync] as Array<(a: JsonObject) => unknown>)
    assert.throws(() => gated({ tool: 'tests.echo', target: 'echo:gen' }, fn), /is a generator function: calling it runs none of its body/);

  const c = new CountingClient(cs.url, cs.token('agent:ts-gated-generator'));
  const bodies: string[] = [];
  const lazy = gated({ tool: 'tests.echo', target: 'echo:lazy', client: c }, function lazy(a: { text: string }) {
    return (function* () {
      bodies.push(a.text);
      yield a.text;
    })();
  });
  const result = lazy({ text: 'never' });
  const call = await c.nextSubmitted();
  cs.approve(call.id, call.digest);
  await assert.rejects(within(result, 30_000, 'gated'), (e: unknown) => e instanceof TypeError && /lazy returned a generator without running it \(it was closed\)/.test(e.message));
  assert.deepEqual(bodies, []);
  const done = await c.get(call.id);
  assert.equal(done.outcome?.status, 'unknown');
  assert.match(done.outcome?.detail ?? '', /returned a generator without running it/);
});
