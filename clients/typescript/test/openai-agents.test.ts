// The OpenAI Agents SDK adapter, driven by a fake Model (no network)
// against a real console: the model calls a gated tool, the run stops with
// an interruption, the resolver takes it to Countersign and resumes the run
// with the operator's decision; the tool runs only after a redemption.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Agent, RunState, ToolCallError, Usage, run, setTracingDisabled, tool, type Model, type ModelRequest, type ModelResponse } from '@openai/agents';
import { z } from 'zod';
import { CountersignError } from '../src/errors.js';
import { CountersignApprovals } from '../src/openai-agents.js';
import { Console, OPERATOR, RecordingClient, within } from './harness.js';

setTracingDisabled(true);

let cs: Console;
before(async () => {
  cs = await Console.start();
});
after(async () => {
  await cs.stop();
});

/** A model that calls `refund` with args on its first turn and then
 * answers with text; inputs records what it was sent each turn. */
class ScriptedModel implements Model {
  inputs: string[] = [];
  constructor(private readonly args: object) {}
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.inputs.push(JSON.stringify(request.input));
    const output: ModelResponse['output'] =
      this.inputs.length === 1
        ? [{ type: 'function_call', callId: 'call_1', name: 'refund', arguments: JSON.stringify(this.args), status: 'completed' }]
        : [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'done' }] }];
    return { usage: new Usage(), output, responseId: `resp_${this.inputs.length}` };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<never> {
    throw new Error('the tests do not stream');
  }
}

// setup gives each process a token of its own, unless it is handed the
// token of the process it takes over from (a restart keeps its
// credentials: a call belongs to the token that submitted it).
function setup(actor: string, args: object, token: string = cs.token(actor)) {
  const client = new RecordingClient(cs.url, token);
  const approvals = new CountersignApprovals(client);
  const ran: unknown[] = [];
  const refund = tool({
    name: 'refund',
    description: 'Refund part or all of an invoice',
    parameters: z.object({ amount_minor: z.number().int(), currency: z.string(), reason_code: z.string() }),
    ...approvals.guard({ tool: 'payments.refund', target: 'invoice:INV-1042' }, async (a: { amount_minor: number }) => {
      ran.push(a);
      return `refund re_1 of ${a.amount_minor} issued`;
    }),
  });
  const model = new ScriptedModel(args);
  const agent = new Agent({ name: 'billing', instructions: 'Refund what is asked.', model, tools: [refund] });
  return { client, approvals, ran, model, agent };
}

const ARGS = { amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' };

test('approved: the interruption goes to Countersign, and the tool runs after redemption', async () => {
  const { client, approvals, ran, model, agent } = setup('agent:oa-1', ARGS);
  const first = await run(agent, 'Refund INV-1042');
  assert.equal(first.interruptions?.length, 1, 'the gated tool interrupts the run');
  assert.equal(ran.length, 0);
  const resolved = approvals.resolve(first, (state) => run(agent, state));
  const call = await client.nextSubmitted();
  assert.deepEqual([call.tool, call.target, call.args], ['payments.refund', 'invoice:INV-1042', ARGS]);
  assert.equal(ran.length, 0, 'nothing runs before approval');
  cs.approve(call.id, call.digest);
  const result = await within(resolved, 30_000, 'resolve');
  assert.deepEqual(ran, [ARGS]);
  assert.equal(result.finalOutput, 'done');
  assert.match(model.inputs[1]!, /refund re_1 of 1299 issued/, 'the model saw the result');
  const done = await client.get(call.id);
  assert.deepEqual([done.status, done.outcome?.status], ['redeemed', 'succeeded']);
});

test('denied: the run resumes with the operator reason as the rejection, and the tool never runs', async () => {
  const { client, approvals, ran, model, agent } = setup('agent:oa-2', { ...ARGS, amount_minor: 500 });
  const first = await run(agent, 'Refund INV-1042');
  const resolved = approvals.resolve(first, (state) => run(agent, state));
  const call = await client.nextSubmitted();
  cs.deny(call.id, 'already refunded on 2 May');
  const result = await within(resolved, 30_000, 'resolve');
  assert.equal(ran.length, 0);
  assert.equal(result.finalOutput, 'done');
  assert.match(model.inputs[1]!, new RegExp(`Denied by ${OPERATOR}: already refunded on 2 May`), 'the model read the reason');
});

test('countered: the run resumes with what the operator changed as the rejection, and the tool never runs', async () => {
  const { client, approvals, ran, model, agent } = setup('agent:oa-counter', { ...ARGS, amount_minor: 40000 });
  const first = await run(agent, 'Refund INV-1042');
  const resolved = approvals.resolve(first, (state) => run(agent, state));
  const call = await client.nextSubmitted();
  cs.counter(call.id, call.digest, { '/amount_minor': '4000' });
  const result = await within(resolved, 30_000, 'resolve');
  assert.deepEqual(ran, []);
  assert.equal(result.finalOutput, 'done');
  assert.match(model.inputs[1]!, /Countered: an operator did not approve payments.refund on invoice:INV-1042 as it was/);
  assert.match(model.inputs[1]!, /amount_minor changed from 40000 to 4000/);
});

test('an approval made in the run state alone runs nothing', async () => {
  // The SDK's approval is client-held state: approve the interruption
  // directly, as a forged or replayed run state would, and resume.
  const { client, ran, agent } = setup('agent:oa-3', { ...ARGS, amount_minor: 700 });
  const first = await run(agent, 'Refund INV-1042');
  first.state.approve(first.interruptions![0]!);
  const result = await within(run(agent, first.state), 30_000, 'run');
  assert.equal(ran.length, 0, 'the tool did not run');
  const proposed = await client.nextSubmitted();
  assert.equal(proposed.status, 'pending', 'the call went to an operator instead');
  assert.match(JSON.stringify(result.history), /no operator approved this call in Countersign/);
  await client.cancel(proposed.id);
});

test('a run state resumed in another process redeems the decision the console holds', async () => {
  // Process A stops at the interruption and an operator approves; process
  // B, with the serialized run state and no memory of A, runs the tool.
  const token = cs.token('agent:oa-4');
  const a = setup('agent:oa-4', { ...ARGS, amount_minor: 800 }, token);
  const first = await run(a.agent, 'Refund INV-1042');
  const saved = first.state.toString();
  const resolved = a.approvals.resolve(first, async (state) => {
    // A approved in the console and in the state, then "crashed" before resuming.
    return { ...first, interruptions: [], state } as unknown as typeof first;
  });
  const call = await a.client.nextSubmitted();
  cs.approve(call.id, call.digest);
  await within(resolved, 30_000, 'resolve');

  const b = setup('agent:oa-4', { ...ARGS, amount_minor: 800 }, token);
  const state = await RunState.fromString(b.agent, saved);
  assert.equal(state.getInterruptions().length, 1);
  state.approve(state.getInterruptions()[0]!);
  const result = await within(run(b.agent, state), 30_000, 'run');
  assert.deepEqual(b.ran, [{ ...ARGS, amount_minor: 800 }]);
  assert.equal(result.finalOutput, 'done');
  const done = await b.client.get(call.id);
  assert.deepEqual([done.status, done.outcome?.status], ['redeemed', 'succeeded']);

  // The same state replayed again finds the grant spent: nothing runs twice.
  const replay = await RunState.fromString(b.agent, saved);
  replay.approve(replay.getInterruptions()[0]!);
  const again = await within(run(b.agent, replay), 30_000, 'run');
  assert.equal(b.ran.length, 1, 'a replayed run state does not run the tool again');
  assert.match(JSON.stringify(again.history), /no operator approved this call in Countersign/);
  const resubmitted = await b.client.nextSubmitted();
  assert.deepEqual([resubmitted.id, resubmitted.created], [call.id, false], 'B found the approved call in the console');
  const replayed = await b.client.nextSubmitted();
  assert.equal(replayed.status, 'pending', 'the replay became a new proposal for an operator');
  await b.client.cancel(replayed.id);
});

test("aborted while the tool runs: the run's signal reaches it, and the outcome is unknown", async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:oa-abort'));
  const approvals = new CountersignApprovals(client);
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const refund = tool({
    name: 'refund',
    description: 'Refund part or all of an invoice',
    parameters: z.object({ amount_minor: z.number().int(), currency: z.string(), reason_code: z.string() }),
    ...approvals.guard({ tool: 'payments.refund', target: 'invoice:INV-1042' }, async (_a: { amount_minor: number }, signal?: AbortSignal) => {
      started();
      // Works until the run is told to stop.
      return await new Promise<string>((_, reject) => signal!.addEventListener('abort', () => reject(signal!.reason), { once: true }));
    }),
  });
  const agent = new Agent({ name: 'billing', instructions: 'Refund what is asked.', model: new ScriptedModel(ARGS), tools: [refund] });
  const ctrl = new AbortController();
  const first = await run(agent, 'Refund INV-1042');
  const resolved = approvals.resolve(first, (state) => run(agent, state, { signal: ctrl.signal }));
  const call = await client.nextSubmitted();
  cs.approve(call.id, call.digest);
  await within(running, 30_000, 'the tool to start');
  ctrl.abort(new Error('the user stopped the agent'));
  await assert.rejects(within(resolved, 30_000, 'resolve'), /the user stopped the agent/);
  const done = await client.get(call.id);
  assert.deepEqual([done.status, done.outcome?.status, done.outcome?.detail], ['redeemed', 'unknown', 'aborted while it ran: it may have done part of its work']);
});

/** Asserts e is the client's error for a revoked token. */
function isRevoked(e: unknown): true {
  assert.ok(e instanceof CountersignError, `want CountersignError, got ${String(e)}`);
  assert.deepEqual([e.code, e.status, e.refusal], ['unauthorized', 401, false]);
  return true;
}

test('a revoked token: resolve throws the client error and rejects nothing for the model', async () => {
  const { approvals, ran, model, agent } = setup('agent:oa-revoked', ARGS);
  const first = await run(agent, 'Refund INV-1042');
  assert.equal(first.interruptions?.length, 1);
  cs.revokeTokens('agent:oa-revoked');
  let resumed = 0;
  await assert.rejects(
    within(approvals.resolve(first, (state) => (resumed++, run(agent, state))), 30_000, 'resolve'),
    isRevoked,
  );
  assert.equal(resumed, 0, 'the run was not resumed with a rejection');
  assert.equal(model.inputs.length, 1, 'the model was sent nothing after the failure');
  assert.equal(ran.length, 0);
});

test("a revoked token in the tool's execute rejects the run; the model reads no message of it", async () => {
  // Approved in the run state alone, so execute asks the console itself.
  const { ran, model, agent } = setup('agent:oa-revoked-2', { ...ARGS, amount_minor: 900 });
  const first = await run(agent, 'Refund INV-1042');
  first.state.approve(first.interruptions![0]!);
  cs.revokeTokens('agent:oa-revoked-2');
  await assert.rejects(within(run(agent, first.state), 30_000, 'run'), (e: unknown) => {
    // The SDK wraps what a tool threw in its ToolCallError.
    assert.ok(e instanceof ToolCallError, `want ToolCallError, got ${String(e)}`);
    return isRevoked(e.error);
  });
  assert.equal(model.inputs.length, 1, 'the model was sent nothing after the failure');
  assert.equal(ran.length, 0);
});
