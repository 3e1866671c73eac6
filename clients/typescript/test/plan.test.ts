// Plans against a real `console serve` on 127.0.0.1: the plan() helper
// submits, waits for a person's approval on the plan's page, then mints,
// redeems and reports each item in turn; a failing item halts the plan.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Client, CountersignError, type Call, type PlanProposal } from '../src/index.js';
import { Console } from './harness.js';

let cs: Console;
before(async () => {
  cs = await Console.start();
});
after(async () => {
  await cs.stop();
});

const steps = (n: number): PlanProposal => ({
  rationale: 'three steps',
  ordered: true,
  items: Array.from({ length: n }, (_, i) => ({ tool: 'tests.plan', target: `step:s${i}`, args: { n: i } })),
});

/** A person approves the next plan on the queue, on its page. */
async function approveWhenSubmitted(): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const id = await cs.pendingPlan();
    if (id) return cs.approvePlan(id);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('no plan was submitted');
}

test('plan() mints, redeems and reports item by item', async () => {
  const c = new Client(cs.url, cs.token('agent:ts-stepper'));
  const approving = approveWhenSubmitted();
  const ran: string[] = [];
  const p = await c.plan(steps(3), (item: Call) => void ran.push(item.target), { intervalMs: 50, timeoutMs: 30_000 });
  await approving;
  assert.deepEqual(ran, ['step:s0', 'step:s1', 'step:s2']);
  assert.equal(p.status, 'approved');
  for (const item of p.items) {
    assert.equal(item.status, 'redeemed');
    assert.equal(item.plan?.id, p.id);
    assert.equal(item.approvals.given?.[0]?.method, 'plan');
    assert.equal(item.approvals.given?.[0]?.human, 'true');
  }
});

test('waitPlan long-polls: it returns at the approval, not at its next interval', async () => {
  const c = new Client(cs.url, cs.token('agent:ts-waiter'));
  const approving = approveWhenSubmitted();
  const submitted = await c.submitPlan(steps(1));
  const start = Date.now();
  const p = await c.waitPlan(submitted.id, { intervalMs: 3_600_000, timeoutMs: 20_000 });
  await approving;
  assert.equal(p.status, 'approved');
  assert.ok(Date.now() - start < 20_000);
});

test('a failing item halts the plan', async () => {
  const c = new Client(cs.url, cs.token('agent:ts-halter'));
  const approving = approveWhenSubmitted();
  const ran: Call[] = [];
  await assert.rejects(
    c.plan(steps(3), (item) => (ran.push(item), ran.length === 2 ? 'failed' : undefined), { intervalMs: 50, timeoutMs: 30_000 }),
    (e: unknown) => e instanceof CountersignError && e.code === 'plan_halted',
  );
  await approving;
  assert.equal(ran.length, 2);
  const planId = ran[0]!.plan!.id;
  assert.equal((await c.getPlan(planId)).status, 'halted');
  await assert.rejects(c.mintItem(planId, 2), (e: unknown) => e instanceof CountersignError && e.code === 'plan_halted');
  assert.equal((await c.cancelPlan(planId)).status, 'cancelled');
});

test('every problem of every item is listed', async () => {
  const c = new Client(cs.url, cs.token('agent:ts-sloppy'));
  await assert.rejects(
    c.submitPlan({
      rationale: 'bad',
      items: [
        { tool: 'tests.plan', target: 'step:a', args: { n: 'x' } },
        { tool: 'tests.echo', target: 'echo:a', args: { text: 'a' } },
      ],
    }),
    (e: unknown) =>
      e instanceof CountersignError && e.code === 'invalid_arguments' &&
      JSON.stringify(e.problems.map((p) => p.path)) === JSON.stringify(['/items/0/args/n', '/items/1/tool']),
  );
});
