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
 * reporting the outcome. When the operator denies the call (or nobody
 * decides in time, or the console refuses the proposal) the tool's result
 * is a refusal the model can read, with the operator's reason; the
 * original execute never runs.
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
  countersign: 'denied' | 'expired' | 'cancelled' | 'refused' | 'redemption_rejected';
  /** What happened, in words for the model. */
  message: string;
  call_id?: string;
  /** The operator's reason, for a denial. */
  reason?: string;
  by?: string;
  /** The console's error, for a refused proposal: code and every problem. */
  error?: ErrorBody['error'];
}

/** Whether a tool result is a refusal of Countersign. */
export function isRefusal(v: unknown): v is GateRefusal {
  return typeof v === 'object' && v !== null && typeof (v as GateRefusal).countersign === 'string' && typeof (v as GateRefusal).message === 'string';
}

/** The refusal a model reads for an error of the gate, or undefined for an
 * error that is not the model's to act on (the console unreachable). */
export function refusalOf(e: unknown): GateRefusal | undefined {
  if (e instanceof NotApprovedError) {
    const r: GateRefusal = { countersign: e.code as GateRefusal['countersign'], message: e.message, call_id: e.call.id };
    if (e.reason) r.reason = e.reason;
    if (e.by) r.by = e.by;
    return r;
  }
  if (e instanceof RedemptionRejectedError)
    return { countersign: 'redemption_rejected', message: `the grant was refused (${e.code}): the call did not run`, call_id: e.redemption.call_id };
  if (e instanceof CountersignError && e.status !== undefined && e.status >= 400 && e.status < 500)
    return { countersign: 'refused', message: e.message, error: e.toJSON().error };
  return undefined;
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
