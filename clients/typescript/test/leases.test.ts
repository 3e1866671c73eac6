// The execution lease against a real `console serve` on 127.0.0.1: what an
// accepted redemption carries (the hashed envelope, the lease), heartbeats
// and who may send them, an expired lease and a person's resolution, and
// gated()'s heartbeats while the function runs.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';
import {
  Client,
  CountersignError,
  DIGEST_PREFIX,
  canonicalEnvelope,
  envelope,
  gated,
  specOf,
  type Call,
  type Lease,
  type Submitted,
} from '../src/index.js';
import { Console, OPERATOR } from './harness.js';

let cs: Console;
before(async () => {
  cs = await Console.start();
});
after(async () => {
  await cs.stop();
});

let n = 0;
const newClient = (actor = '') => new Client(cs.url, cs.token(actor || `agent:ts-lease-${++n}`));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function rejects(p: Promise<unknown>): Promise<CountersignError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof CountersignError, String(e));
    return e;
  }
  assert.fail('did not throw');
}

/** Polls cond until it returns something (the console's lease loop acts on its own clock). */
async function until<T>(what: string, cond: () => Promise<T | undefined | false>, limitMs = 20_000): Promise<T> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

/** A call of tests.lease (outcome_within 2 s), approved and redeemed. */
async function redeemed(c: Client, k: number) {
  let call: Call = await c.submit({ tool: 'tests.lease', target: `lease:n-${k}`, args: { n: k } });
  cs.approve(call.id, call.digest);
  call = await c.wait(call.id);
  const r = await c.redeem(call.grant!, specOf(call));
  assert.equal(r.accepted, true, r.reason);
  return { call, r };
}

test('an accepted redemption carries the hashed envelope and the lease', async () => {
  const c = newClient();
  const start = Date.now();
  const { call, r } = await redeemed(c, 1);
  const env = canonicalEnvelope(envelope(call.actor, call.audience, call.tool, call.target, call.args));
  assert.equal(r.envelope, env);
  assert.equal(createHash('sha256').update(DIGEST_PREFIX).update(r.envelope!).digest('hex'), call.digest);
  assert.equal(r.digest, call.digest);
  assert.equal(r.outcome_within, 2);
  const until = Date.parse(r.lease_until!);
  assert.ok(until > start && until <= Date.now() + 2_000, r.lease_until);
  const got = await c.get(call.id);
  assert.deepEqual([got.status, got.lease_until, got.outcome], ['redeemed', r.lease_until, undefined]);
  assert.ok(got.redeemed_at);
});

test('a heartbeat extends the lease, for the redeeming token only', async () => {
  const c = newClient('agent:ts-beats');
  const { call, r } = await redeemed(c, 2);
  const lease: Lease = await c.heartbeat(call.id);
  assert.deepEqual([lease.call_id, lease.extend_max], [call.id, 2]);
  assert.ok(Date.parse(lease.lease_until) >= Date.parse(r.lease_until!));
  // A shorter extension never shortens the lease.
  assert.ok(Date.parse((await c.heartbeat(call.id, { extendSeconds: 1 })).lease_until) >= Date.parse(lease.lease_until));
  let e = await rejects(c.heartbeat(call.id, { extendSeconds: 3 }));
  assert.deepEqual([e.code, e.status], ['invalid_arguments', 422]);
  assert.ok(e.hasProblem('out_of_range', '/extend_seconds'));
  e = await rejects(c.heartbeat(call.id, { extendSeconds: 0.5 }));
  assert.equal(e.code, 'out_of_range');
  // Another token, even of the same actor, is told the call does not exist.
  e = await rejects(new Client(cs.url, cs.token('agent:ts-beats')).heartbeat(call.id));
  assert.deepEqual([e.code, e.status], ['not_found', 404]);
  await c.reportOutcome(call.id, 'succeeded');
  e = await rejects(c.heartbeat(call.id));
  assert.deepEqual([e.code, e.status], ['outcome_already_reported', 409]);

  const early = await c.submit({ tool: 'tests.lease', target: 'lease:early', args: { n: 3 } });
  e = await rejects(c.heartbeat(early.id));
  assert.deepEqual([e.code, e.status], ['not_redeemed', 409]);
});

test('an expired lease, then a person resolves the call', async () => {
  const c = newClient();
  const { call } = await redeemed(c, 4);
  const got = await until('the lease to expire', async () => {
    const g = await c.get(call.id);
    return g.outcome && g;
  });
  assert.equal(got.outcome?.status, 'lease_expired');
  assert.ok(got.outcome?.at);
  assert.equal(got.resolution, undefined);
  const e = await rejects(c.heartbeat(call.id));
  assert.deepEqual([e.code, e.status], ['lease_expired', 409]);

  await cs.resolve(call.id, 'not_executed', 'the ledger shows no such entry', 'https://ledger.example.com/search?q=n-4');
  const res = (await c.get(call.id)).resolution;
  assert.ok(res);
  const { at, ...rest } = res;
  assert.deepEqual(rest, { verdict: 'not_executed', by: OPERATOR, note: 'the ledger shows no such entry', evidence: 'https://ledger.example.com/search?q=n-4' });
  assert.ok(Date.parse(at) > 0);
  // A late report is still accepted, and both stay on record.
  const late = await c.reportOutcome(call.id, 'failed', 'it never started');
  assert.deepEqual([late.outcome?.status, late.resolution?.verdict], ['failed', 'not_executed']);
});

/** Approves every call it submits, remembers them, and counts heartbeats. */
class ApprovingClient extends Client {
  beats = 0;
  calls: Submitted[] = [];
  override async submit(...a: Parameters<Client['submit']>): Promise<Submitted> {
    const call = await super.submit(...a);
    this.calls.push(call);
    cs.approve(call.id, call.digest);
    return call;
  }
  override async heartbeat(...a: Parameters<Client['heartbeat']>): Promise<Lease> {
    const lease = await super.heartbeat(...a);
    this.beats++;
    return lease;
  }
  last(): Submitted {
    return this.calls[this.calls.length - 1]!;
  }
}

test('gated() keeps the lease alive while the function runs, and stops on return', async () => {
  const c = new ApprovingClient(cs.url, cs.token('agent:ts-gated-lease'));
  const seen: { outcome?: unknown; leaseUntil?: number; first?: number; at?: number } = {};
  const longJob = gated({ tool: 'tests.lease', target: 'lease:long', client: c }, async (a: { n: number }) => {
    const first = Date.parse((await c.get(c.last().id)).lease_until!);
    // Run past the end of the first lease (2 s): heartbeats keep it.
    await until('the first lease to pass', async () => Date.now() > first + 1_500);
    const got = await c.get(c.last().id);
    Object.assign(seen, { outcome: got.outcome, leaseUntil: Date.parse(got.lease_until!), first, at: Date.now() });
    return a.n * 2;
  });
  assert.equal(await longJob({ n: 21 }), 42);
  assert.equal(seen.outcome, undefined, 'the lease expired while the function ran');
  assert.ok(seen.leaseUntil! > seen.at! && seen.leaseUntil! > seen.first!, JSON.stringify(seen));
  assert.ok(c.beats >= 2, `${c.beats} heartbeats`);
  const beats = c.beats;
  const done = await c.get(c.last().id);
  assert.deepEqual([done.status, done.outcome?.status], ['redeemed', 'succeeded']);
  await sleep(1_500); // more than two heartbeat intervals
  assert.equal(c.beats, beats, 'heartbeats after the function returned');

  // A function that throws stops them too.
  const failing = gated({ tool: 'tests.lease', target: 'lease:fails', client: c, heartbeatEveryMs: 200 }, async () => {
    await until('a heartbeat', async () => c.beats > beats);
    throw new Error('no');
  });
  await assert.rejects(failing({}), /no/);
  const after = c.beats;
  assert.equal((await c.get(c.last().id)).outcome?.status, 'failed');
  await sleep(600);
  assert.equal(c.beats, after, 'heartbeats after the function threw');
});

test('gated() heartbeats are bounded, and can be turned off', async () => {
  const c = new ApprovingClient(cs.url, cs.token('agent:ts-gated-bounded'));
  const stuck = gated({ tool: 'tests.lease', target: 'lease:stuck', client: c, heartbeatEveryMs: 300, maxHeartbeatMs: 1_000 }, async () => {
    // Heartbeats stop after a second: the lease ends and the console records that nobody reported.
    const got = await until('the lease to expire', async () => {
      const g = await c.get(c.last().id);
      return g.outcome && g;
    });
    return got.outcome!.status;
  });
  assert.equal(await stuck({}), 'lease_expired');
  assert.ok(c.beats <= 3, `${c.beats} heartbeats`);
  // The function's own report, late, replaces lease_expired.
  assert.equal((await c.get(c.last().id)).outcome?.status, 'succeeded');

  const quick = gated({ tool: 'tests.lease', target: 'lease:none', client: c, heartbeat: false }, async (a: { n: number }) => a.n);
  const before = c.beats;
  assert.equal(await quick({ n: 1 }), 1);
  assert.equal(c.beats, before);
});
