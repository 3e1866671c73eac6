/** gated(): a function that runs only with a redeemed grant. */

import type { NumberPaths } from './canonical.js';
import { Client, decided, specOf } from './client.js';
import { NotApprovedError, RedemptionRejectedError } from './errors.js';
import type { Call, JsonObject } from './types.js';

const MAX_DETAIL = 1000;

export interface GateOptions<A extends JsonObject> {
  /** The tool's name in the console's tools file, such as payments.refund. */
  tool: string;
  /** The target, or a function of the arguments. */
  target: string | ((args: A) => string);
  /** The agent's words for the operator, or a function of the arguments. */
  rationale?: string | ((args: A) => string | undefined);
  /** Default: Client.fromEnv() (COUNTERSIGN_URL, COUNTERSIGN_TOKEN), read at each call. */
  client?: Client;
  /** Give up waiting after this long (WaitTimeoutError). */
  timeoutMs?: number;
  /** Check the console's digest against one recomputed here first (DigestMismatch). */
  verifyDigest?: boolean;
  /** The tool's informational members, for verifyDigest. */
  informational?: readonly string[];
  /** The number paths of a tool mirrored from MCP, for verifyDigest. */
  numberPaths?: NumberPaths;
}

/** Proposes the call and waits for its decision; returns the approved call
 * or throws NotApprovedError (denied, expired, cancelled). */
export async function propose<A extends JsonObject>(options: GateOptions<A>, args: A, signal?: AbortSignal): Promise<Call> {
  const client = options.client ?? Client.fromEnv();
  const target = typeof options.target === 'function' ? options.target(args) : options.target;
  const rationale = typeof options.rationale === 'function' ? options.rationale(args) : options.rationale;
  let call: Call = await client.submit({ tool: options.tool, target, args, ...(rationale ? { rationale } : {}) }, signal);
  if (options.verifyDigest) client.verifyDigest(call, { args, informational: options.informational, numberPaths: options.numberPaths });
  if (!decided(call)) call = await client.wait(call.id, { timeoutMs: options.timeoutMs, signal });
  if (call.status !== 'approved') throw new NotApprovedError(call);
  return call;
}

/** Redeems an approved call's grant, runs fn with exactly the redeemed
 * arguments, and reports the outcome: a throw reports failed and is thrown
 * again, a return reports succeeded. Nothing runs when the redemption is
 * refused (RedemptionRejectedError). */
export async function redeemAndRun<A extends JsonObject, R>(
  client: Client,
  call: Call,
  fn: (args: A) => R | Promise<R>,
  signal?: AbortSignal,
): Promise<R> {
  const redemption = await client.redeem(call.grant ?? '', specOf(call), signal);
  if (!redemption.accepted) throw new RedemptionRejectedError(redemption);
  let result: R;
  try {
    result = await fn(call.args as A);
  } catch (e) {
    await report(client, call.id, 'failed', e instanceof Error ? `${e.name}: ${e.message}` : String(e));
    throw e;
  }
  await report(client, call.id, 'succeeded');
  return result;
}

/**
 * Gates a function behind an operator's approval. Each call proposes
 * `tool` with the arguments object, waits for the decision, redeems the
 * grant, runs fn with exactly the redeemed arguments, and reports the
 * outcome.
 *
 * It throws, before fn runs: CountersignError for a refused proposal (code
 * and problems for the model), NotApprovedError (denied with `reason` and
 * `by`, expired, cancelled), WaitTimeoutError, RedemptionRejectedError.
 *
 * ```ts
 * const refund = gated({ tool: 'payments.refund', target: 'invoice:INV-1042' },
 *   async (a: { amount_minor: number; currency: string; reason_code: string }) => payments.refund(a));
 * await refund({ amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' });
 * ```
 */
export function gated<A extends JsonObject, R>(
  options: GateOptions<A>,
  fn: (args: A) => R | Promise<R>,
): (args: A, signal?: AbortSignal) => Promise<R> {
  return async (args: A, signal?: AbortSignal) => {
    const client = options.client ?? Client.fromEnv();
    const call = await propose({ ...options, client }, args, signal);
    return redeemAndRun(client, call, fn, signal);
  };
}

async function report(client: Client, id: string, status: 'succeeded' | 'failed', detail?: string): Promise<void> {
  // The tool has run: failing to report must not turn its result into an
  // error (a caller might run it again). The console records a missing
  // outcome when the execution lease ends.
  if (detail && detail.length > MAX_DETAIL) detail = detail.slice(0, MAX_DETAIL - 1) + '…';
  try {
    await client.reportOutcome(id, status, detail);
  } catch (e) {
    process.emitWarning(`countersign: could not report outcome ${status} of ${id}: ${(e as Error).message}`);
  }
}
