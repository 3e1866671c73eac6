/**
 * Countersign for the Vercel AI SDK (`ai`, version 6): a tool whose
 * execute runs only with a grant an operator approved for exactly the
 * arguments the model chose.
 *
 * ```ts
 * import { tool } from 'ai';
 * import { gateTool } from '@countersign/client/ai';
 *
 * const refund = gateTool(tool({ description: 'Refund an invoice', inputSchema: z.object({...}),
 *   execute: async (a) => payments.refund(a) }), { tool: 'payments.refund', target: 'invoice:INV-1042' });
 * ```
 *
 * The wrapped execute submits the call, waits for the decision, redeems the
 * grant and runs the original execute with the redeemed arguments,
 * reporting the outcome. When an operator answers the call with an edited
 * one (a counter-proposal), the result is a refusal (countersign:
 * 'countered') stating what the operator changed and the edited call's
 * arguments; the model runs it by calling the tool with exactly those
 * (with acceptCounter the edited call runs at once instead). When the operator denies the call (or nobody
 * decides in time, or the console refuses the proposal) the tool's result
 * is a refusal the model can read, with the operator's reason; the
 * original execute never runs.
 *
 * A failure that is not a refusal of the call (the agent's token unknown or
 * revoked, a tool the console does not know, a 5xx, an unreachable console:
 * see CountersignError.refusal) is thrown as the client's CountersignError,
 * never handed to the model as a refusal: the SDK records it as the step's
 * `tool-error` part, whose `error` is that CountersignError. Add
 * stopOnGateFailure to `stopWhen` so that the model is not called again
 * after one, and read it with gateFailure(result.steps).
 *
 * The AI SDK's own `needsApproval` asks the application, and binds nothing;
 * leave it unset on a gated tool.
 */

import type { Tool, ToolExecutionOptions } from 'ai';
import { Client } from './client.js';
import { CountersignError, NotApprovedError, RedemptionRejectedError, type ErrorBody } from './errors.js';
import { propose, redeemAndRun, type GateOptions } from './gated.js';
import type { JsonObject } from './types.js';

/** The tool result when the call did not run. */
export interface GateRefusal {
  countersign: 'denied' | 'expired' | 'cancelled' | 'countered' | 'refused' | 'redemption_rejected';
  /** What happened, in words for the model. */
  message: string;
  call_id?: string;
  /** The operator's reason, for a denial. */
  reason?: string;
  by?: string;
  /** The console's error, for a refused proposal: code and every problem. */
  error?: ErrorBody['error'];
  /** For a call an operator countered: what the operator changed, one
   * phrase per member, and the edited call (calling the tool with exactly
   * its arguments accepts and runs it once approved). */
  changed?: string[];
  counter?: { call_id: string; digest: string; target: string; args: Record<string, unknown> };
}

/** Whether a tool result is a refusal of Countersign. */
export function isRefusal(v: unknown): v is GateRefusal {
  return typeof v === 'object' && v !== null && typeof (v as GateRefusal).countersign === 'string' && typeof (v as GateRefusal).message === 'string';
}

/** The refusal a model reads for an error of the gate, or undefined for an
 * error that is not the model's to act on and must be thrown (see
 * CountersignError.refusal: a bad or revoked token, a 5xx, the console
 * unreachable). */
export function refusalOf(e: unknown): GateRefusal | undefined {
  if (e instanceof NotApprovedError) {
    const r: GateRefusal = { countersign: e.code as GateRefusal['countersign'], message: e.message, call_id: e.call.id };
    if (e.reason) r.reason = e.reason;
    if (e.by) r.by = e.by;
    if (e.counter) {
      r.changed = e.changes;
      r.counter = { call_id: e.counter.id, digest: e.counter.digest, target: e.counter.envelope.target, args: e.counter.envelope.args };
    }
    return r;
  }
  if (e instanceof RedemptionRejectedError && e.refusal)
    return { countersign: 'redemption_rejected', message: `the grant was refused (${e.code}): the call did not run`, call_id: e.redemption.call_id };
  if (e instanceof CountersignError && e.refusal)
    return { countersign: 'refused', message: e.message, error: e.toJSON().error };
  return undefined;
}

/** The parts of a step that gateFailure reads. */
interface StepContent {
  readonly content: ReadonlyArray<{ readonly type: string; readonly error?: unknown }>;
}

/** The first operational failure a gated tool threw in these steps (a
 * CountersignError that is not a refusal: a bad or revoked token, a 5xx,
 * the console unreachable), or undefined. The SDK keeps it as a step's
 * `tool-error` part. */
export function gateFailure(steps: ReadonlyArray<StepContent>): CountersignError | undefined {
  for (const step of steps)
    for (const part of step.content)
      if (part.type === 'tool-error' && part.error instanceof CountersignError && !part.error.refusal) return part.error;
  return undefined;
}

/** A `stopWhen` condition: the run stops after the step in which a gated
 * tool threw an operational failure, so the model is not called again with
 * it. Read it with gateFailure(result.steps). */
export function stopOnGateFailure({ steps }: { steps: ReadonlyArray<StepContent> }): boolean {
  return gateFailure(steps) !== undefined;
}

async function settle<T>(v: AsyncIterable<T> | PromiseLike<T> | T): Promise<T> {
  if (v !== null && typeof v === 'object' && Symbol.asyncIterator in v) {
    // A streaming execute: its last value is the result.
    let last: T | undefined;
    for await (const part of v as AsyncIterable<T>) last = part;
    return last as T;
  }
  return await v;
}

/** Wraps an AI SDK tool so that its execute runs only approved. */
export function gateTool<INPUT extends JsonObject, OUTPUT>(
  t: Tool<INPUT, OUTPUT>,
  options: GateOptions<INPUT>,
): Tool<INPUT, OUTPUT | GateRefusal> {
  const execute = t.execute;
  if (typeof execute !== 'function') throw new TypeError('gateTool: the tool has no execute to gate');
  return {
    ...t,
    execute: async (input: INPUT, opts: ToolExecutionOptions): Promise<OUTPUT | GateRefusal> => {
      const client = options.client ?? Client.fromEnv();
      try {
        const call = await propose({ ...options, client }, input, opts.abortSignal);
        return await redeemAndRun(client, call, (args: INPUT) => settle(execute(args, opts)), opts.abortSignal, options);
      } catch (e) {
        const r = refusalOf(e);
        if (r) return r;
        throw e;
      }
    },
  } as Tool<INPUT, OUTPUT | GateRefusal>;
}
