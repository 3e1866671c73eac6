// gated meets a counter-proposal against a real console: without
// acceptCounter it is a refusal carrying the counter and what changed, and
// nothing runs; with it the edited call is accepted, approved, redeemed and
// run; proposing exactly the counter's call accepts it.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { NotApprovedError } from '../src/errors.js';
import { gated } from '../src/gated.js';
import { Console, RecordingClient, within } from './harness.js';

let cs: Console;
before(async () => {
  cs = await Console.start();
});
after(async () => {
  await cs.stop();
});

type Refund = { amount_minor: number; currency: string; reason_code: string };
const ARGS: Refund = { amount_minor: 40000, currency: 'USD', reason_code: 'duplicate' };

function refund(client: RecordingClient, ran: Refund[], acceptCounter?: boolean) {
  return gated({ tool: 'payments.refund', target: 'invoice:INV-4200', client, acceptCounter, heartbeat: false }, async (a: Refund) => {
    ran.push(a);
    return `refunded ${a.amount_minor}`;
  });
}

test('countered, not opted in: NotApprovedError carries the counter and what changed; nothing runs', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ts-counter-1'));
  const ran: Refund[] = [];
  const done = refund(client, ran)(ARGS);
  const call = await client.nextSubmitted();
  const counter = cs.counter(call.id, call.digest, { '/amount_minor': '4000' });
  const err = await within(done.then(() => undefined, (e: unknown) => e), 30_000, 'gated');
  assert.ok(err instanceof NotApprovedError, String(err));
  assert.equal(err.code, 'countered');
  assert.ok(err.refusal);
  assert.equal(err.counter?.id, counter.id);
  assert.deepEqual(err.changes, ['amount_minor changed from 40000 to 4000']);
  assert.match(err.message, /amount_minor changed from 40000 to 4000/);
  assert.match(err.message, /"amount_minor":4000/);
  assert.deepEqual(ran, []);
  const c = await client.get(counter.id);
  assert.equal(c.accepted_at, undefined, 'the counter was accepted without the caller opting in');

  // The caller proposes exactly the counter's call: that accepts it, and
  // it runs.
  const again = refund(client, ran)({ ...ARGS, amount_minor: 4000 });
  assert.equal(await within(again, 30_000, 'gated with the counter'), 'refunded 4000');
  assert.deepEqual(ran, [{ ...ARGS, amount_minor: 4000 }]);
  const after = await client.get(counter.id);
  assert.deepEqual([after.status, after.outcome?.status], ['redeemed', 'succeeded']);
});

test('countered, acceptCounter: the edited call is accepted, redeemed and run', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ts-counter-2'));
  const ran: Refund[] = [];
  const done = refund(client, ran, true)(ARGS);
  const call = await client.nextSubmitted();
  const counter = cs.counter(call.id, call.digest, { '/amount_minor': '4000', '/reason_code': '"requested"' });
  assert.equal(await within(done, 30_000, 'gated'), 'refunded 4000');
  assert.deepEqual(ran, [{ amount_minor: 4000, currency: 'USD', reason_code: 'requested' }]);
  const [orig, edited] = await Promise.all([client.get(call.id), client.get(counter.id)]);
  assert.equal(orig.status, 'countered');
  assert.deepEqual([edited.status, edited.outcome?.status, edited.countered_from], ['redeemed', 'succeeded', call.id]);
});

test('proposed again after a counter, acceptCounter runs the counter previously_countered names', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ts-counter-3'));
  const ran: Refund[] = [];
  const done = refund(client, ran)(ARGS);
  const call = await client.nextSubmitted();
  const counter = cs.counter(call.id, call.digest, { '/amount_minor': '4000' });
  await within(done.then(() => assert.fail('ran'), () => undefined), 30_000, 'gated');
  assert.equal(await within(refund(client, ran, true)(ARGS), 30_000, 'gated again'), 'refunded 4000');
  assert.deepEqual(ran, [{ ...ARGS, amount_minor: 4000 }]);
  assert.equal((await client.get(counter.id)).status, 'redeemed');
});
