// The Vercel AI SDK adapter, driven by the SDK's own mock language model
// (ai/test) against a real console: the model calls the tool, an operator
// decides, and the model reads the result or the operator's reason.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { gateFailure, gateTool, isRefusal, refusalOf, stopOnGateFailure } from '../src/ai.js';
import { ConsoleUnreachable, CountersignError, RedemptionRejectedError } from '../src/errors.js';
import { Console, OPERATOR, RecordingClient, within } from './harness.js';

let cs: Console;
before(async () => {
  cs = await Console.start();
});
after(async () => {
  await cs.stop();
});

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** A model that calls `refund` with args on its first turn and then
 * answers with text; prompts records what it was sent each turn. */
function scriptedModel(args: object) {
  const prompts: string[] = [];
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      prompts.push(JSON.stringify(options.prompt));
      if (prompts.length === 1) {
        return {
          content: [{ type: 'tool-call', toolCallId: 'call-1', toolName: 'refund', input: JSON.stringify(args) }],
          finishReason: { unified: 'tool-calls', raw: undefined },
          usage,
          warnings: [],
        };
      }
      return { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: undefined }, usage, warnings: [] };
    },
  });
  return { model, prompts };
}

function refundTool(client: RecordingClient, ran: unknown[]) {
  return gateTool(
    tool({
      description: 'Refund part or all of an invoice',
      inputSchema: z.object({ amount_minor: z.number().int(), currency: z.enum(['USD', 'EUR', 'JPY']), reason_code: z.string() }),
      execute: async (a) => {
        ran.push(a);
        return { refund: 're_1', amount_minor: a.amount_minor };
      },
    }),
    { tool: 'payments.refund', target: 'invoice:INV-1042', client, rationale: 'the model asked for it' },
  );
}

test('approved: the tool runs with the approved arguments and the model reads its result', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ai-1'));
  const ran: unknown[] = [];
  const { model, prompts } = scriptedModel({ amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' });
  const done = generateText({ model, tools: { refund: refundTool(client, ran) }, prompt: 'Refund INV-1042', stopWhen: stepCountIs(3) });
  const call = await client.nextSubmitted();
  assert.deepEqual([call.tool, call.target, call.args, call.rationale], [
    'payments.refund',
    'invoice:INV-1042',
    { amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' },
    'the model asked for it',
  ]);
  assert.equal(ran.length, 0, 'nothing runs before approval');
  cs.approve(call.id, call.digest);
  const result = await within(done, 30_000, 'generateText');
  assert.deepEqual(ran, [{ amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' }]);
  assert.equal(result.text, 'done');
  const toolResult = result.steps[0]!.toolResults[0]!;
  assert.deepEqual(toolResult.output, { refund: 're_1', amount_minor: 1299 });
  assert.match(prompts[1]!, /re_1/, 'the model saw the result');
  const after = await client.get(call.id);
  assert.deepEqual([after.status, after.outcome?.status], ['redeemed', 'succeeded']);
});

test('denied: the model reads the operator reason, and the tool never runs', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ai-2'));
  const ran: unknown[] = [];
  const { model, prompts } = scriptedModel({ amount_minor: 500, currency: 'EUR', reason_code: 'fraud' });
  const done = generateText({ model, tools: { refund: refundTool(client, ran) }, prompt: 'Refund INV-1042', stopWhen: stepCountIs(3) });
  const call = await client.nextSubmitted();
  cs.deny(call.id, 'the customer confirmed this charge; no refund');
  const result = await within(done, 30_000, 'generateText');
  assert.equal(ran.length, 0);
  const output = result.steps[0]!.toolResults[0]!.output;
  assert.ok(isRefusal(output), JSON.stringify(output));
  assert.deepEqual([output.countersign, output.reason, output.by, output.call_id], ['denied', 'the customer confirmed this charge; no refund', OPERATOR, call.id]);
  assert.match(prompts[1]!, /the customer confirmed this charge; no refund/, 'the model saw the reason');
});

test('countered: the model reads what the operator changed and the edited arguments; the tool never runs', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ai-counter'));
  const ran: unknown[] = [];
  const { model, prompts } = scriptedModel({ amount_minor: 40000, currency: 'USD', reason_code: 'duplicate' });
  const done = generateText({ model, tools: { refund: refundTool(client, ran) }, prompt: 'Refund INV-1042', stopWhen: stepCountIs(3) });
  const call = await client.nextSubmitted();
  const counter = cs.counter(call.id, call.digest, { '/amount_minor': '4000' });
  const result = await within(done, 30_000, 'generateText');
  assert.equal(ran.length, 0);
  const output = result.steps[0]!.toolResults[0]!.output;
  assert.ok(isRefusal(output), JSON.stringify(output));
  assert.equal(output.countersign, 'countered');
  assert.deepEqual(output.changed, ['amount_minor changed from 40000 to 4000']);
  assert.deepEqual([output.counter?.call_id, output.counter?.args], [counter.id, { amount_minor: 4000, currency: 'USD', reason_code: 'duplicate' }]);
  assert.match(prompts[1]!, /amount_minor changed from 40000 to 4000/, 'the model was told what changed');
});

test('a refused proposal reaches the model with every problem', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ai-3'));
  const ran: unknown[] = [];
  const { model, prompts } = scriptedModel({ amount_minor: 1299, currency: 'USD', reason_code: 'because' });
  const t = gateTool(
    tool({
      description: 'Refund',
      inputSchema: z.object({ amount_minor: z.number(), currency: z.string(), reason_code: z.string() }),
      execute: async (a) => ran.push(a),
    }),
    { tool: 'payments.refund', target: 'invoice:INV-1', client },
  );
  const result = await within(generateText({ model, tools: { refund: t }, prompt: 'x', stopWhen: stepCountIs(3) }), 30_000, 'generateText');
  const output = result.steps[0]!.toolResults[0]!.output;
  assert.ok(isRefusal(output));
  assert.equal(output.countersign, 'refused');
  assert.equal(output.error?.code, 'invalid_arguments');
  assert.deepEqual(output.error?.problems?.map((p) => `${p.code} ${p.path}`), ['enum_mismatch /args/reason_code']);
  assert.match(prompts[1]!, /enum_mismatch/);
  assert.equal(ran.length, 0);
});

test('aborted while the tool runs: generateText rejects, and the outcome is unknown', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ai-abort'));
  const { model } = scriptedModel({ amount_minor: 42, currency: 'USD', reason_code: 'duplicate' });
  let started!: () => void;
  const running = new Promise<void>((r) => (started = r));
  const slow = gateTool(
    tool({
      description: 'Refund part or all of an invoice',
      inputSchema: z.object({ amount_minor: z.number().int(), currency: z.enum(['USD', 'EUR', 'JPY']), reason_code: z.string() }),
      // Works until the SDK's abortSignal says stop.
      execute: async (_a, { abortSignal }) => {
        started();
        return await new Promise<{ refund: string }>((_, reject) =>
          abortSignal!.addEventListener('abort', () => reject(abortSignal!.reason), { once: true }),
        );
      },
    }),
    { tool: 'payments.refund', target: 'invoice:INV-1042', client },
  );
  const ctrl = new AbortController();
  const done = generateText({ model, tools: { refund: slow }, prompt: 'Refund INV-1042', stopWhen: stepCountIs(3), abortSignal: ctrl.signal });
  const call = await client.nextSubmitted();
  cs.approve(call.id, call.digest);
  await within(running, 30_000, 'the tool to start');
  ctrl.abort(new Error('the user closed the chat'));
  await assert.rejects(within(done, 30_000, 'generateText'), /the user closed the chat/);
  const after = await client.get(call.id);
  assert.deepEqual([after.status, after.outcome?.status, after.outcome?.detail], ['redeemed', 'unknown', 'aborted while it ran: it may have done part of its work']);
});

/** A step's tool-error part: how the SDK records an execute that threw. */
function toolError(result: { steps: Array<{ content: Array<{ type: string; error?: unknown }> }> }): unknown {
  const part = result.steps[0]!.content.find((p) => p.type === 'tool-error');
  assert.ok(part, `no tool-error in the step: ${JSON.stringify(result.steps[0]!.content)}`);
  return part.error;
}

test('a revoked token is thrown to the application, never handed to the model as a refusal', async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ai-revoked'));
  cs.revokeTokens('agent:ai-revoked');
  const ran: unknown[] = [];
  const args = { amount_minor: 1299, currency: 'USD' as const, reason_code: 'duplicate' };
  const t = refundTool(client, ran);
  // The gated execute itself throws the client's error, with the console's code.
  await assert.rejects(t.execute!(args, { toolCallId: 'call-0', messages: [] }) as Promise<unknown>, (e: unknown) => {
    assert.ok(e instanceof CountersignError, String(e));
    assert.deepEqual([e.code, e.status, e.refusal], ['unauthorized', 401, false]);
    return true;
  });
  // Through the SDK: the step's tool-error carries that error; no tool
  // result says the call was refused.
  const { model, prompts } = scriptedModel(args);
  const result = await within(generateText({ model, tools: { refund: t }, prompt: 'x', stopWhen: stepCountIs(3) }), 30_000, 'generateText');
  const err = toolError(result);
  assert.ok(err instanceof CountersignError && err.code === 'unauthorized' && err.status === 401, String(err));
  assert.equal(result.steps[0]!.toolResults.length, 0, 'no tool result');
  assert.doesNotMatch(prompts[1]!, /"countersign"|denied|refused/, 'the model was not told the call was refused');
  assert.equal(gateFailure(result.steps), err);
  assert.equal(ran.length, 0);

  // With stopOnGateFailure the run ends at that step: the model is not called again.
  const again = scriptedModel(args);
  const stopped = await within(
    generateText({ model: again.model, tools: { refund: t }, prompt: 'x', stopWhen: [stepCountIs(3), stopOnGateFailure] }),
    30_000,
    'generateText',
  );
  assert.equal(again.prompts.length, 1, 'the model was called once, before the tool');
  const failure = gateFailure(stopped.steps);
  assert.ok(failure instanceof CountersignError && failure.code === 'unauthorized', String(failure));
  assert.equal(ran.length, 0);
});

test("a token not allowed the tool's host is thrown to the application (403 audience_not_allowed)", async () => {
  const client = new RecordingClient(cs.url, cs.token('agent:ai-audience', 'crm-host'));
  const ran: unknown[] = [];
  const { model } = scriptedModel({ amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' });
  const result = await within(generateText({ model, tools: { refund: refundTool(client, ran) }, prompt: 'x', stopWhen: stepCountIs(3) }), 30_000, 'generateText');
  const err = toolError(result);
  assert.ok(err instanceof CountersignError, String(err));
  assert.deepEqual([err.code, err.status, err.refusal], ['audience_not_allowed', 403, false]);
  assert.equal(result.steps[0]!.toolResults.length, 0);
  assert.equal(ran.length, 0);
});

test('an unreachable console is thrown to the application', async () => {
  // A port nothing listens on: the console's own, after it stopped.
  const gone = await Console.start();
  const url = gone.url;
  const token = gone.token('agent:ai-gone');
  await gone.stop();
  const ran: unknown[] = [];
  const { model } = scriptedModel({ amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' });
  const t = refundTool(new RecordingClient(url, token), ran);
  const result = await within(generateText({ model, tools: { refund: t }, prompt: 'x', stopWhen: stepCountIs(3) }), 30_000, 'generateText');
  const err = toolError(result);
  assert.ok(err instanceof ConsoleUnreachable, String(err));
  assert.deepEqual([err.code, err.status, err.refusal], ['unavailable', undefined, false]);
  assert.equal(ran.length, 0);
});

test('refusals of the call stay refusals; failures of the agent or the console do not', () => {
  const of = (status: number, error: object) => CountersignError.fromResponse(status, JSON.stringify({ error }));
  const problem = [{ code: 'enum_mismatch', path: '/args/currency', message: 'x' }];
  const cases: Array<[string, CountersignError, boolean]> = [
    ['invalid_arguments', of(422, { code: 'invalid_arguments', message: 'x', problems: problem }), true],
    ['malformed_json', of(400, { code: 'malformed_json', message: 'x', problems: [{ code: 'malformed_json', path: '', message: 'x' }] }), true],
    ['too_large', of(413, { code: 'too_large', message: 'x' }), true],
    ['denied_by_policy', of(403, { code: 'denied_by_policy', message: 'x', reason: 'r' }), true],
    ['previously_denied', of(409, { code: 'previously_denied', message: 'x', reason: 'r' }), true],
    ['retry_limit', of(429, { code: 'retry_limit', message: 'x' }), true],
    ['unauthorized', of(401, { code: 'unauthorized', message: 'the token is unknown or revoked' }), false],
    ['audience_not_allowed', of(403, { code: 'audience_not_allowed', message: 'x' }), false],
    ['unknown_tool', of(422, { code: 'unknown_tool', message: 'x', problems: [{ code: 'unknown_tool', path: '/tool', message: 'x' }] }), false],
    ['too_many_waits', of(429, { code: 'too_many_waits', message: 'x' }), false],
    ['frozen', of(503, { code: 'frozen', message: 'x' }), false],
    ['internal', of(500, { code: 'internal', message: 'x' }), false],
    ['not JSON', CountersignError.fromResponse(502, '<html>bad gateway</html>'), false],
    ['unreachable', new ConsoleUnreachable('POST http://127.0.0.1:9/api/v1/calls', new Error('connect ECONNREFUSED')), false],
  ];
  for (const [name, e, want] of cases) assert.equal(e.refusal, want, name);
});

test('a rejected grant is the model\'s only when the call or the grant\'s life is at fault', () => {
  const rejected = (reason: string, statusCode = 403) =>
    new RedemptionRejectedError({ decision: 'rejected', accepted: false, call_id: 'call_x', reason, message: 'x', checks: [], statusCode });
  const refusals = ['tool_mismatch', 'target_mismatch', 'digest_mismatch', 'expired', 'revoked', 'tool_changed'];
  const failures = ['actor_mismatch', 'audience_mismatch', 'unknown_key', 'bad_signature', 'bad_claims', 'not_yet_valid', 'malformed', 'a_new_reason'];
  for (const r of refusals) {
    assert.equal(rejected(r).refusal, true, r);
    assert.equal(refusalOf(rejected(r))?.countersign, 'redemption_rejected', r);
  }
  assert.equal(rejected('replayed', 409).refusal, true, 'replayed');
  for (const r of failures) {
    assert.equal(rejected(r).refusal, false, r);
    assert.equal(refusalOf(rejected(r)), undefined, `${r} is handed to the model`);
  }
});
