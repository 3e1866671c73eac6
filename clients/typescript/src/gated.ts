/** gated(): a function that runs only with a redeemed grant. */

import type { NumberPaths } from './canonical.js';
import { Client, decided, specOf } from './client.js';
import { CountersignError, NotApprovedError, RedemptionRejectedError } from './errors.js';
import type { Call, JsonObject, OutcomeStatus } from './types.js';

const MAX_DETAIL = 1000;

/** How long, in all, heartbeats keep a gated function's lease alive unless
 * told otherwise: a function that runs longer loses its lease and the call
 * waits for a person (its outcome is still accepted when it returns). */
export const DEFAULT_MAX_HEARTBEAT_MS = 3_600_000;

/** The console's answers after which no heartbeat can succeed. */
const FINAL = new Set(['lease_expired', 'not_lease_holder', 'not_redeemed', 'outcome_already_reported', 'not_found']);

/** How a gated function keeps its execution lease while it runs. */
export interface LeaseOptions {
  /** Send heartbeats while the function runs (default true). */
  heartbeat?: boolean;
  /** Time between heartbeats (default a third of the tool's outcome_within). */
  heartbeatEveryMs?: number;
  /** Heartbeats stop after this long in all (default one hour). */
  maxHeartbeatMs?: number;
}

export interface GateOptions<A extends JsonObject> extends LeaseOptions {
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
  /** When an operator answers the call with an edited one (a
   * counter-proposal), accept it and run the function with the edited
   * arguments once it is approved. Default false: a countered call throws
   * NotApprovedError (code countered) carrying the counter and what
   * changed, and nothing runs. */
  acceptCounter?: boolean;
}

/** Proposes the call and waits for its decision; returns the approved call
 * or throws NotApprovedError (denied, expired, cancelled, countered).
 *
 * A counter-proposal is run only by choice: with acceptCounter, a call an
 * operator countered (or one refused as previously_countered) is answered
 * by accepting the counter and waiting for it, and the approved call
 * returned is the edited one. Proposing exactly a counter's call (as a
 * model does when told the counter's arguments) accepts it too. */
export async function propose<A extends JsonObject>(options: GateOptions<A>, args: A, signal?: AbortSignal): Promise<Call> {
  const client = options.client ?? Client.fromEnv();
  const target = typeof options.target === 'function' ? options.target(args) : options.target;
  const rationale = typeof options.rationale === 'function' ? options.rationale(args) : options.rationale;
  let call: Call;
  let proposed = true;
  try {
    call = await client.submit({ tool: options.tool, target, args, ...(rationale ? { rationale } : {}) }, signal);
  } catch (e) {
    if (!(options.acceptCounter && e instanceof CountersignError && e.code === 'previously_countered' && e.counteredBy)) throw e;
    call = await client.accept(e.counteredBy, signal);
    proposed = false;
  }
  if (options.verifyDigest && proposed)
    client.verifyDigest(call, { args, informational: options.informational, numberPaths: options.numberPaths });
  if (call.countered_from && !call.accepted_at && call.status === 'pending') call = await client.accept(call.id, signal);
  if (!decided(call)) call = await client.wait(call.id, { timeoutMs: options.timeoutMs, signal });
  if (call.status === 'countered' && call.countered_by && options.acceptCounter) {
    call = await client.accept(call.countered_by.id, signal);
    if (!decided(call)) call = await client.wait(call.id, { timeoutMs: options.timeoutMs, signal });
  }
  if (call.status !== 'approved') throw new NotApprovedError(call);
  return call;
}

/** Redeems an approved call's grant, runs fn with exactly the redeemed
 * arguments (and the signal), awaits it, and reports the outcome once it
 * settled: a throw reports failed and is thrown again, a return reports
 * succeeded. Nothing runs when the redemption is refused
 * (RedemptionRejectedError). While fn runs, heartbeats keep its lease alive
 * (lease: LeaseOptions).
 *
 * An abort of `signal`: before the redemption, nothing is sent; during it,
 * the redemption is not cut short (its answer says whether the lease
 * started) and fn does not run: an accepted redemption is reported failed,
 * saying nothing ran; while fn runs, fn is left to stop (it has the signal),
 * and a throw is then reported unknown (it may have done part of its work),
 * a return succeeded. Either way the abort's reason is thrown once the
 * outcome is reported. A function that returns a generator is reported
 * unknown and throws TypeError (the generator is closed unrun). */
export async function redeemAndRun<A extends JsonObject, R>(
  client: Client,
  call: Call,
  fn: (args: A, signal?: AbortSignal) => R | Promise<R>,
  signal?: AbortSignal,
  lease: LeaseOptions = {},
): Promise<R> {
  signal?.throwIfAborted();
  const redemption = await client.redeem(call.grant ?? '', specOf(call));
  if (!redemption.accepted) throw new RedemptionRejectedError(redemption);
  if (signal?.aborted) {
    await report(client, call.id, 'failed', 'aborted before it ran: nothing was run');
    throw signal.reason;
  }
  const every = lease.heartbeatEveryMs ?? ((redemption.outcome_within ?? 0) * 1000) / 3;
  const beats =
    lease.heartbeat !== false && every > 0
      ? new Heartbeats(client, call.id, Math.max(every, 200), lease.maxHeartbeatMs ?? DEFAULT_MAX_HEARTBEAT_MS)
      : undefined;
  let result: R;
  try {
    result = await fn(call.args as A, signal);
  } catch (e) {
    await beats?.stop();
    if (signal?.aborted) await report(client, call.id, 'unknown', 'aborted while it ran: it may have done part of its work');
    else await report(client, call.id, 'failed', e instanceof Error ? `${e.name}: ${e.message}` : String(e));
    throw e;
  }
  await beats?.stop();
  const unrun = closeUnrun(result);
  if (unrun) {
    await report(client, call.id, 'unknown', unrun);
    throw new TypeError(`gated: ${fn.name || 'the function'} ${unrun}`);
  }
  await report(client, call.id, 'succeeded');
  return result;
}

/** Why a function's result means its work was not done when it settled, or
 * undefined. A generator is closed, so its body never runs. */
function closeUnrun(v: unknown): string | undefined {
  const tag = Object.prototype.toString.call(v);
  if (tag !== '[object Generator]' && tag !== '[object AsyncGenerator]') return undefined;
  void Promise.resolve((v as { return(): unknown }).return()).catch(() => {});
  return 'returned a generator without running it (it was closed): gate a function that does the work and returns its result';
}

/** Whether calling fn gives a generator (its body runs only when iterated). */
function isGeneratorFunction(fn: unknown): boolean {
  const tag = Object.prototype.toString.call(fn);
  return tag === '[object GeneratorFunction]' || tag === '[object AsyncGeneratorFunction]';
}

/**
 * Sends heartbeats for a redeemed call every `everyMs`, until stop(), until
 * `limitMs` have passed, or until the console says no heartbeat can succeed
 * any more (the lease already expired). A heartbeat that fails otherwise
 * (the console briefly unreachable) is tried again at the next beat.
 * `sent` counts those the console accepted.
 */
export class Heartbeats {
  sent = 0;
  private timer: NodeJS.Timeout | undefined;
  private inflight: Promise<void> = Promise.resolve();
  private stopped = false;
  private readonly abort = new AbortController();
  private readonly deadline: number;

  constructor(
    private readonly client: Client,
    private readonly id: string,
    private readonly everyMs: number,
    private readonly limitMs: number,
  ) {
    this.deadline = performance.now() + limitMs;
    this.schedule();
  }

  private schedule(): void {
    if (!this.stopped) this.timer = setTimeout(() => this.beat(), this.everyMs);
  }

  private beat(): void {
    if (this.stopped) return;
    if (performance.now() + this.everyMs > this.deadline) {
      process.emitWarning(`countersign: ${this.id} still runs after ${this.limitMs / 1000} s of heartbeats; its lease is left to end`);
      this.stopped = true;
      return;
    }
    this.inflight = this.client.heartbeat(this.id, { signal: this.abort.signal }).then(
      () => {
        this.sent++;
        this.schedule();
      },
      (e: unknown) => {
        if (this.stopped) return;
        if (e instanceof CountersignError && FINAL.has(e.code)) {
          process.emitWarning(`countersign: heartbeats of ${this.id} stopped: ${e.message}`);
          this.stopped = true;
          return;
        }
        this.schedule();
      },
    );
  }

  /** Whether heartbeats are still being sent. */
  get running(): boolean {
    return !this.stopped;
  }

  /** Stops sending, and waits for a heartbeat under way to settle. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.inflight;
  }
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
 * While fn runs, heartbeats keep the executor's lease alive (every third of
 * the tool's outcome_within, for at most an hour in all: see LeaseOptions);
 * they stop before the outcome is reported, which is once fn's promise
 * settled.
 *
 * fn receives the signal given to the gated function as its second
 * argument. An abort while waiting for the decision runs nothing and leaves
 * the call pending; for an abort after that see redeemAndRun (an abort while
 * fn runs that makes it throw is reported unknown). A generator function is
 * refused (TypeError): calling one runs none of its body.
 *
 * ```ts
 * const refund = gated({ tool: 'payments.refund', target: 'invoice:INV-1042' },
 *   async (a: { amount_minor: number; currency: string; reason_code: string }) => payments.refund(a));
 * await refund({ amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' });
 * ```
 */
export function gated<A extends JsonObject, R>(
  options: GateOptions<A>,
  fn: (args: A, signal?: AbortSignal) => R | Promise<R>,
): (args: A, signal?: AbortSignal) => Promise<R> {
  if (isGeneratorFunction(fn))
    throw new TypeError(
      `gated: ${fn.name || 'the function'} is a generator function: calling it runs none of its body, so the outcome would be reported before any work was done; gate a function that does the work and returns its result`,
    );
  return async (args: A, signal?: AbortSignal) => {
    const client = options.client ?? Client.fromEnv();
    const call = await propose({ ...options, client }, args, signal);
    return redeemAndRun(client, call, fn, signal, options);
  };
}

async function report(client: Client, id: string, status: OutcomeStatus, detail?: string): Promise<void> {
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
