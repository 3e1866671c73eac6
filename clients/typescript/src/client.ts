/** The HTTP client of Countersign's agent API (v1): global fetch only. */

import { digestOf, envelope, without, type NumberPaths } from './canonical.js';
import { ConsoleUnreachable, CountersignError, DigestMismatch, WaitTimeoutError } from './errors.js';
import type {
  Call,
  CallSpec,
  JsonObject,
  HeartbeatRequest,
  KeySet,
  Lease,
  OutcomeRequest,
  OutcomeStatus,
  Plan,
  PlanProposal,
  Proposal,
  RedeemRequest,
  Redemption,
  RedemptionBody,
  Submitted,
} from './types.js';

export const DEFAULT_POLL_WAIT_MS = 60_000;
export const DEFAULT_REQUEST_TIMEOUT_MS = 30_000;
export const DEFAULT_MAX_OUTAGE_MS = 120_000;
const USER_AGENT = 'countersign-typescript-client/1';

export interface ClientOptions {
  /** How long one long-poll of wait asks the console to hold (default 60 s, its maximum). */
  pollWaitMs?: number;
  /** Bounds each request (default 30 s); a long-poll gets its wait on top. */
  requestTimeoutMs?: number;
  /** How long wait keeps retrying an unreachable or restarting console (default 2 min; 0: until aborted). */
  maxOutageMs?: number;
  /** First and longest pause between wait's retries (default 200 ms, 5 s). */
  backoffMs?: [number, number];
  /** The fetch to use (default the global one). */
  fetch?: typeof fetch;
}

export interface WaitOptions {
  /** Give up after this long: WaitTimeoutError carries the last state seen. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface VerifyOptions {
  /** The arguments as proposed (default: the call's own). */
  args?: JsonObject;
  /** The tool's informational members (JSON Pointers into args such as
   * `/notes`), which the digest leaves out. */
  informational?: readonly string[];
  numberPaths?: NumberPaths;
}

/** Whether a call has left pending: approved, denied, expired, cancelled or redeemed. */
export const decided = (call: Call): boolean => call.status !== 'pending';

/** The call as it must be presented at redemption: its own tool, target and args. */
export const specOf = (call: Call): CallSpec => ({ tool: call.tool, target: call.target, args: call.args });

class Transient extends Error {
  constructor(readonly error: CountersignError) {
    super(error.message);
  }
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, Math.max(0, ms));
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * Talks to one Countersign console with one agent token.
 *
 * ```ts
 * const c = new Client('http://127.0.0.1:8080', token);
 * let call = await c.submit({ tool: 'payments.refund', target: 'invoice:INV-1042',
 *   args: { amount_minor: 1299, currency: 'USD', reason_code: 'duplicate' } });
 * call = await c.wait(call.id);
 * if (call.status === 'approved' && (await c.redeem(call.grant!, specOf(call))).accepted) {
 *   // run the tool, then
 *   await c.reportOutcome(call.id, 'succeeded', 'refund re-1042 issued');
 * }
 * ```
 *
 * Numbers must be integers within ±(2^53−1): the console refuses fractions
 * (money is an integer in minor units) except where a tool mirrored from
 * MCP declares a number.
 */
export class Client {
  readonly url: string;
  private readonly token: string;
  private readonly pollWaitMs: number;
  private readonly requestTimeoutMs: number;
  private readonly maxOutageMs: number;
  private readonly backoffMs: [number, number];
  private readonly fetch: typeof fetch;

  constructor(url: string, token: string, options: ClientOptions = {}) {
    this.url = url.replace(/\/+$/, '');
    this.token = token;
    this.pollWaitMs = options.pollWaitMs ?? DEFAULT_POLL_WAIT_MS;
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.maxOutageMs = options.maxOutageMs ?? DEFAULT_MAX_OUTAGE_MS;
    this.backoffMs = options.backoffMs ?? [200, 5_000];
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /** A client for COUNTERSIGN_URL (default http://127.0.0.1:8080) with the
   * token in COUNTERSIGN_TOKEN. */
  static fromEnv(options: ClientOptions = {}): Client {
    const token = process.env.COUNTERSIGN_TOKEN;
    if (!token)
      throw new CountersignError('unauthorized', 'COUNTERSIGN_TOKEN is not set: create a token with `console token create --actor ... --audience ...` and export it');
    return new Client(process.env.COUNTERSIGN_URL || 'http://127.0.0.1:8080', token, options);
  }

  /** Proposes a call. Returns the stored call: a new one (`created` true)
   * or the same actor's identical call still pending or approved. A refused
   * proposal throws CountersignError with every problem (invalid_arguments,
   * unknown_tool, retry_limit, previously_denied, ...). */
  async submit(proposal: Proposal, signal?: AbortSignal): Promise<Submitted> {
    const body: Proposal = { tool: proposal.tool, target: proposal.target, args: proposal.args ?? {} };
    if (proposal.rationale) body.rationale = proposal.rationale;
    return this.submitJSON(encode(body), signal);
  }

  /** Proposes a call whose JSON text the caller wrote; sent as it is. */
  async submitJSON(text: string, signal?: AbortSignal): Promise<Submitted> {
    const [status, data] = await this.do('POST', '/api/v1/calls', text, { signal });
    const call = readCall(status, data, [200, 201]);
    return { ...call, created: status === 201 };
  }

  /** One of this agent's calls (another actor's is a 404). */
  async get(id: string, signal?: AbortSignal): Promise<Call> {
    const [status, data] = await this.do('GET', callPath(id), undefined, { signal });
    return readCall(status, data, [200]);
  }

  /** Long-polls until the call is no longer pending and returns it:
   * approved with its grant, denied with the operator's reason, expired,
   * cancelled or redeemed. Rides out a console restart (connection
   * refused or reset, 502, 503, 504) for up to maxOutageMs. With timeoutMs
   * it throws WaitTimeoutError carrying the last state seen. */
  async wait(id: string, options: WaitOptions = {}): Promise<Call> {
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    let last: Call | undefined;
    let outageStart: number | undefined;
    let delay = this.backoffMs[0];
    // A poll that answers early with the call still pending (one approval
    // of several, a console draining) is followed by a pause.
    const minInterval = Math.min(this.pollWaitMs, 500);
    for (;;) {
      let waitMs = this.pollWaitMs;
      if (deadline !== undefined) waitMs = Math.max(Math.min(waitMs, deadline - Date.now() - 250), 0);
      const start = Date.now();
      let call: Call;
      try {
        call = await this.poll(id, waitMs, options.signal);
      } catch (e) {
        if (!(e instanceof Transient)) throw e;
        outageStart ??= start;
        if (this.maxOutageMs > 0 && Date.now() - outageStart >= this.maxOutageMs) throw e.error;
        const pause = delay / 2 + Math.random() * (delay / 2);
        if (deadline !== undefined && Date.now() + pause >= deadline) throw last ? new WaitTimeoutError(last) : e.error;
        await sleep(pause, options.signal);
        delay = Math.min(2 * delay, this.backoffMs[1]);
        continue;
      }
      last = call;
      outageStart = undefined;
      delay = this.backoffMs[0];
      if (decided(call)) return call;
      if (deadline !== undefined && Date.now() >= deadline - 250) throw new WaitTimeoutError(call);
      await sleep(minInterval - (Date.now() - start), options.signal);
    }
  }

  private async poll(id: string, waitMs: number, signal?: AbortSignal): Promise<Call> {
    let status: number, data: string;
    try {
      [status, data] = await this.do('GET', `${callPath(id)}?wait=${Math.floor(waitMs)}ms`, undefined, {
        signal,
        timeoutMs: waitMs + this.requestTimeoutMs,
      });
    } catch (e) {
      if (e instanceof ConsoleUnreachable) throw new Transient(e);
      throw e;
    }
    if (status === 502 || status === 503 || status === 504) throw new Transient(CountersignError.fromResponse(status, data));
    return readCall(status, data, [200]);
  }

  /** Presents the grant with the call it was issued for, right before
   * executing it: exactly the approved call (`specOf(call)`). A rejection
   * (403, or 409 for a grant already redeemed) is returned, not thrown. A
   * redemption refused because an operator froze the call's tool or actor
   * throws CountersignError with code `frozen` (status 503, `reason` the
   * freeze's): nothing was consumed, and the grant may be redeemed once the
   * freeze is lifted, while it lives. */
  async redeem(grant: string, call: CallSpec, signal?: AbortSignal): Promise<Redemption> {
    const body: RedeemRequest = { grant, call: { tool: call.tool, target: call.target, args: call.args ?? {} } };
    const [status, data] = await this.do('POST', '/api/v1/redeem', encode(body), { signal });
    if (status === 200 || status === 403 || status === 409) {
      let r: RedemptionBody | undefined;
      try {
        r = JSON.parse(data) as RedemptionBody;
      } catch {
        r = undefined;
      }
      if (r && (r.decision === 'accepted' || r.decision === 'rejected')) {
        return { ...r, checks: r.checks ?? [], accepted: r.decision === 'accepted' && status === 200, statusCode: status };
      }
    }
    if (status === 503) {
      const frozen = frozenError(data);
      if (frozen) throw frozen;
    }
    throw CountersignError.fromResponse(status, data);
  }

  /** Reports what happened when the redeemed call ran, once, after redemption. */
  async reportOutcome(id: string, status: OutcomeStatus, detail?: string, signal?: AbortSignal): Promise<Call> {
    const body: OutcomeRequest = { status };
    if (detail) body.detail = detail;
    const [st, data] = await this.do('POST', `${callPath(id)}/outcome`, encode(body), { signal });
    return readCall(st, data, [200]);
  }

  /** Extends the executor's lease of a redeemed call while it runs: to
   * `extendSeconds` from now (whole seconds, at most the tool's
   * outcome_within, its default). A lease never shortens. Only the token
   * that redeemed the call may send it; otherwise CountersignError (409
   * not_lease_holder, not_redeemed, outcome_already_reported, or
   * lease_expired when the lease had already ended: the outcome is still
   * accepted, report it). */
  async heartbeat(id: string, options: { extendSeconds?: number; signal?: AbortSignal } = {}): Promise<Lease> {
    let body: string | undefined;
    if (options.extendSeconds !== undefined) {
      const n = options.extendSeconds;
      if (!Number.isInteger(n) || n < 1)
        throw new CountersignError('out_of_range', `extendSeconds must be a whole number of seconds, at least 1 (got ${n})`, {
          problems: [{ code: 'out_of_range', path: '/extend_seconds', message: 'extend_seconds must be at least 1' }],
        });
      const req: HeartbeatRequest = { extend_seconds: n };
      body = encode(req);
    }
    const [status, data] = await this.do('POST', `${callPath(id)}/heartbeat`, body, { signal: options.signal });
    if (status !== 200) throw CountersignError.fromResponse(status, data);
    let lease: Lease | undefined;
    try {
      lease = JSON.parse(data) as Lease;
    } catch {
      lease = undefined;
    }
    if (!lease || typeof lease.call_id !== 'string' || typeof lease.lease_until !== 'string')
      throw new CountersignError('unexpected_response', `the heartbeat's answer is not a lease: ${data.slice(0, 200)}`, { status, raw: data });
    return lease;
  }

  /** Withdraws a pending call (409 not_pending otherwise). */
  async cancel(id: string, signal?: AbortSignal): Promise<Call> {
    const [status, data] = await this.do('DELETE', callPath(id), undefined, { signal });
    return readCall(status, data, [200]);
  }

  /** Accepts a counter-proposal: the call an operator made in answer to a
   * countered one (its `countered_by.id`). The counter's grant is minted
   * once its approvals are complete; wait for it as for any call. A call
   * that is not a counter-proposal is refused (409 not_a_counter). */
  async accept(id: string, signal?: AbortSignal): Promise<Call> {
    const [status, data] = await this.do('POST', `${callPath(id)}/accept`, undefined, { signal });
    return readCall(status, data, [200]);
  }

  /** Proposes a plan (docs/plans.md). A refused plan throws
   * CountersignError listing every problem of every item, with paths into
   * the plan (`/items/3/args/amount_minor`). */
  async submitPlan(plan: PlanProposal, signal?: AbortSignal): Promise<Plan> {
    const body = {
      items: plan.items.map((i) => ({ tool: i.tool, target: i.target, args: i.args ?? {} })),
      rationale: plan.rationale,
      ordered: plan.ordered ?? false,
    };
    const [status, data] = await this.do('POST', '/api/v1/plans', encode(body), { signal });
    return readPlan(status, data, [201]);
  }

  /** One of this token's plans, with every item. */
  async getPlan(id: string, signal?: AbortSignal): Promise<Plan> {
    const [status, data] = await this.do('GET', planPath(id), undefined, { signal });
    return readPlan(status, data, [200]);
  }

  /** Withdraws a pending or approved plan: the grants of its minted,
   * unredeemed items are revoked and its unminted items cancelled. */
  async cancelPlan(id: string, signal?: AbortSignal): Promise<Plan> {
    const [status, data] = await this.do('POST', `${planPath(id)}/cancel`, undefined, { signal });
    return readPlan(status, data, [200]);
  }

  /** Mints the grant of item n (from 0) of an approved plan: the item,
   * approved with its grant, to redeem like any call. */
  async mintItem(planId: string, n: number, signal?: AbortSignal): Promise<Call> {
    const [status, data] = await this.do('POST', `${planPath(planId)}/items/${n}/grant`, undefined, { signal });
    return readCall(status, data, [200]);
  }

  /** Long-polls the plan until it is no longer pending. intervalMs is the
   * least time between two reads, for a read answered early with the plan
   * still pending. */
  async waitPlan(id: string, options: WaitOptions & { intervalMs?: number } = {}): Promise<Plan> {
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    const interval = options.intervalMs ?? 1_000;
    for (;;) {
      let waitMs = this.pollWaitMs;
      if (deadline !== undefined) waitMs = Math.max(Math.min(waitMs, deadline - Date.now() - 250), 0);
      const start = Date.now();
      const [status, data] = await this.do('GET', `${planPath(id)}?wait=${Math.floor(waitMs)}ms`, undefined, {
        signal: options.signal,
        timeoutMs: waitMs + this.requestTimeoutMs,
      });
      const p = readPlan(status, data, [200]);
      if (p.status !== 'pending') return p;
      const pause = interval - (Date.now() - start);
      if (deadline !== undefined && Date.now() + Math.max(pause, 0) > deadline - 250)
        throw new CountersignError('wait_timeout', `plan ${id} is still pending`);
      await sleep(pause, options.signal);
    }
  }

  /** Submits a plan, waits for a person's decision, then for each item in
   * order mints its grant, redeems it, runs it and reports its outcome.
   * `run` resolves to nothing or 'succeeded', 'failed' or 'unknown' (a
   * throw is reported as unknown and thrown again). It stops at the first
   * item that does not succeed (the console halts the plan) with
   * CountersignError `plan_halted`; a plan denied or expired throws
   * `plan_not_pending`. Resolves to the plan after its last item. */
  async plan(
    plan: PlanProposal,
    run: (item: Call) => Promise<OutcomeStatus | void> | OutcomeStatus | void,
    options: WaitOptions & { intervalMs?: number } = {},
  ): Promise<Plan> {
    let p = await this.submitPlan(plan, options.signal);
    p = await this.waitPlan(p.id, options);
    if (p.status !== 'approved')
      throw new CountersignError('plan_not_pending', `the plan is ${p.status}${p.reason ? ': ' + p.reason : ''}`);
    for (let n = 0; n < p.items.length; n++) {
      const item = await this.mintItem(p.id, n, options.signal);
      const r = await this.redeem(item.grant ?? '', specOf(item), options.signal);
      if (!r.accepted) throw new CountersignError(r.reason || 'rejected', `item ${n} of plan ${p.id}: redemption rejected: ${r.message}`);
      let status: OutcomeStatus;
      try {
        status = (await run(item)) || 'succeeded';
      } catch (e) {
        await this.reportOutcome(item.id, 'unknown', String((e as Error)?.message ?? e).slice(0, 1000), options.signal);
        throw e;
      }
      await this.reportOutcome(item.id, status, undefined, options.signal);
      if (status !== 'succeeded')
        throw new CountersignError('plan_halted', `item ${n} of plan ${p.id} reported ${status}; the plan stops here`);
    }
    return this.getPlan(p.id, options.signal);
  }

  /** The console's JSON Web Key Set: the Ed25519 keys that may still verify a live grant. */
  async keys(signal?: AbortSignal): Promise<KeySet> {
    const [status, data] = await this.do('GET', '/api/v1/keys', undefined, { signal, auth: false });
    if (status !== 200) throw CountersignError.fromResponse(status, data);
    return JSON.parse(data) as KeySet;
  }

  /** Recomputes the digest of the call as asked for and checks it against
   * the console's; returns it, or throws DigestMismatch. */
  verifyDigest(call: Call, options: VerifyOptions = {}): string {
    const bound = without(options.args ?? call.args, options.informational ?? []);
    const local = digestOf(envelope(call.actor, call.audience, call.tool, call.target, bound), { numberPaths: options.numberPaths });
    if (local !== call.digest) throw new DigestMismatch(call.id, call.digest, local);
    return local;
  }

  private async do(
    method: string,
    path: string,
    body: string | undefined,
    opts: { signal?: AbortSignal | undefined; timeoutMs?: number; auth?: boolean },
  ): Promise<[number, string]> {
    const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': USER_AGENT };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (opts.auth !== false) headers.Authorization = `Bearer ${this.token}`;
    const timeout = AbortSignal.timeout(opts.timeoutMs ?? this.requestTimeoutMs);
    const signal = opts.signal ? AbortSignal.any([opts.signal, timeout]) : timeout;
    try {
      const res = await this.fetch(this.url + path, { method, headers, body, signal });
      return [res.status, await res.text()];
    } catch (e) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      throw new ConsoleUnreachable(`${method} ${this.url}${path}`, e);
    }
  }
}

function callPath(id: string): string {
  return '/api/v1/calls/' + encodeURIComponent(id);
}

function planPath(id: string): string {
  return '/api/v1/plans/' + encodeURIComponent(id);
}

function readPlan(status: number, data: string, ok: number[]): Plan {
  if (!ok.includes(status)) throw CountersignError.fromResponse(status, data);
  let plan: Plan | undefined;
  try {
    plan = JSON.parse(data) as Plan;
  } catch {
    plan = undefined;
  }
  if (!plan || typeof plan.id !== 'string' || !plan.id)
    throw new CountersignError('unexpected_response', `the response is not a plan: ${data.slice(0, 200)}`, { status, raw: data });
  return plan;
}

function readCall(status: number, data: string, ok: number[]): Call {
  if (!ok.includes(status)) throw CountersignError.fromResponse(status, data);
  let call: Call | undefined;
  try {
    call = JSON.parse(data) as Call;
  } catch {
    call = undefined;
  }
  if (!call || typeof call.id !== 'string' || !call.id)
    throw new CountersignError('unexpected_response', `the response is not a call: ${data.slice(0, 200)}`, { status, raw: data });
  return call;
}

/** The JSON text of a request body. NaN and infinities have no JSON form
 * (JSON.stringify would send null), and a bigint none at all: refused here. */
function encode(v: unknown): string {
  try {
    return JSON.stringify(v, (_key, value: unknown) => {
      if (typeof value === 'number' && !Number.isFinite(value))
        throw new CountersignError('malformed_json', `${value} is not a JSON number (NaN and infinities have no JSON form)`);
      return value;
    });
  } catch (e) {
    if (e instanceof CountersignError) throw e;
    throw new CountersignError('wrong_type', `the request is not JSON: ${(e as Error).message}`);
  }
}

/** The error of a redemption refused because an operator froze the call's
 * tool or actor: a 503 in the redemption's own shape (reason `frozen`, the
 * freeze's reason in `freeze`), or undefined for another answer. An
 * operational failure, not a refusal of the call. */
function frozenError(data: string): CountersignError | undefined {
  let r: RedemptionBody | undefined;
  try {
    r = JSON.parse(data) as RedemptionBody;
  } catch {
    return undefined;
  }
  if (!r || typeof r !== 'object' || r.decision !== 'rejected' || r.reason !== 'frozen') return undefined;
  return new CountersignError('frozen', r.message || "an operator froze this call's tool or actor", {
    status: 503,
    reason: r.freeze?.reason || undefined,
    callId: r.call_id || undefined,
    raw: data,
  });
}
