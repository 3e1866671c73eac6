/**
 * Errors of the Countersign client. Every one carries the API's error shape
 * (`code`, `message`, `problems`), so it can be handed back to the model
 * that proposed the call: `toJSON()` returns `{"error": {...}}`. Only an
 * error whose `refusal` is true is the model's to act on; any other (a bad
 * or revoked token, a 5xx, the console unreachable) is the application's.
 */

import type { Call, CounteredBy, JsonObject, Redemption } from './types.js';

/** One thing wrong with a proposal: a problem code, the JSON Pointer of the
 * offending value from the proposal's root, and a sentence. */
export interface Problem {
  code: string;
  path: string;
  message: string;
}

/** The API's one error shape. */
export interface ErrorBody {
  error: {
    code: string;
    message: string;
    problems?: Problem[];
    /** The operator's reason (previously_denied, denied_by_policy). */
    reason?: string;
    /** The call an error refers to (previously_denied). */
    call_id?: string;
    /** What a person can do about it (retry_limit). */
    hint?: string;
    /** The counter-proposal to accept or decline (previously_countered). */
    countered_by?: string;
  };
}

export interface CountersignErrorFields {
  problems?: Problem[];
  status?: number;
  reason?: string;
  callId?: string;
  hint?: string;
  raw?: string;
  counteredBy?: string;
}

/** The console's answers that refuse the call itself, whatever their
 * status: a rule of the tools file, an operator's earlier denial, the
 * block after three refusals in a row. Beside them, a proposal whose
 * content the console refused (its problems listed) is a refusal too. */
const REFUSAL_CODES = new Set(['denied_by_policy', 'previously_denied', 'retry_limit', 'too_large', 'previously_countered']);

/** An error answer of the console, or a refusal this client made in its
 * name. `status` is the HTTP status, undefined when nothing was sent. */
export class CountersignError extends Error {
  readonly code: string;
  readonly problems: Problem[];
  readonly status: number | undefined;
  readonly reason: string | undefined;
  readonly callId: string | undefined;
  readonly hint: string | undefined;
  /** The response body, when there was one. */
  readonly raw: string | undefined;
  /** The counter-proposal to accept or decline (previously_countered). */
  readonly counteredBy: string | undefined;

  constructor(code: string, message: string, fields: CountersignErrorFields = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.problems = fields.problems ?? [];
    this.status = fields.status;
    this.reason = fields.reason;
    this.callId = fields.callId;
    this.hint = fields.hint;
    this.raw = fields.raw;
    this.counteredBy = fields.counteredBy;
  }

  /**
   * Whether the console refused this call: something the model that
   * proposed it can act on (fix its arguments, stop, ask a person), such as
   * a denial, a rule, an invalid proposal, or the block after repeated
   * refusals. False for an operational failure the application must handle
   * and the model cannot fix: the agent's own token missing, unknown or
   * revoked (401) or not allowed the tool's host (403
   * `audience_not_allowed`), a tool the console does not know
   * (`unknown_tool`: the application names the tool), any 5xx (`frozen`,
   * `unavailable`, `internal`), an unreachable console, an answer not in
   * the API's shape, a digest mismatch, a wait that timed out.
   */
  get refusal(): boolean {
    if (this.status === undefined) return false;
    if (REFUSAL_CODES.has(this.code)) return true;
    // A refused proposal lists its problems (malformed_json,
    // invalid_arguments, ...); unknown_tool lists one too, but names the
    // application's configuration, not the model's arguments.
    return this.status >= 400 && this.status < 500 && this.status !== 401 && this.status !== 403 &&
      this.problems.length > 0 && this.code !== 'unknown_tool';
  }

  /** Whether a problem with code (at path, when given) is listed. */
  hasProblem(code: string, path?: string): boolean {
    return this.problems.some((p) => p.code === code && (path === undefined || p.path === path));
  }

  /** The API's error shape, for a model. */
  toJSON(): ErrorBody {
    const e: ErrorBody['error'] = { code: this.code, message: this.message, problems: this.problems };
    if (this.reason) e.reason = this.reason;
    if (this.callId) e.call_id = this.callId;
    if (this.hint) e.hint = this.hint;
    if (this.counteredBy) e.countered_by = this.counteredBy;
    return { error: e };
  }

  override toString(): string {
    const head = this.status ? `countersign: ${this.status} ${this.code}` : `countersign: ${this.code}`;
    const parts = [`${head}: ${this.message}`];
    for (const p of this.problems) parts.push(p.path ? `${p.code} at ${p.path}: ${p.message}` : `${p.code}: ${p.message}`);
    return parts.join('; ');
  }

  /** Reads the API's error shape, or describes an answer not in it. */
  static fromResponse(status: number, body: string): CountersignError {
    let e: ErrorBody['error'] | undefined;
    try {
      const parsed = JSON.parse(body) as Partial<ErrorBody> | null;
      if (parsed && typeof parsed.error?.code === 'string' && parsed.error.code) e = parsed.error;
    } catch {
      // not JSON: described below
    }
    if (!e) {
      const text = body.trim();
      return new CountersignError('unexpected_response', `HTTP ${status}: ${text.length > 200 ? text.slice(0, 200) + '…' : text}`, { status, raw: body });
    }
    const problems = (e.problems ?? []).map((p) => ({ code: String(p.code ?? ''), path: String(p.path ?? ''), message: String(p.message ?? '') }));
    return new CountersignError(e.code, e.message ?? '', {
      problems,
      status,
      reason: e.reason,
      callId: e.call_id,
      hint: e.hint,
      raw: body,
      counteredBy: typeof e.countered_by === 'string' ? e.countered_by : undefined,
    });
  }
}

/** The console did not answer: refused, reset, timed out (code
 * `unavailable`, no status). `wait` rides out such an outage. */
export class ConsoleUnreachable extends CountersignError {
  constructor(what: string, cause: unknown) {
    super('unavailable', `${what}: the console did not answer (${describe(cause)}); try again later`);
    this.cause = cause;
  }
}

/** A value the console would refuse to hash, refused before anything is
 * sent, with the console's problem codes and JSON Pointers. */
export class DigestError extends CountersignError {}

/** The console's digest of a call is not the digest recomputed here from
 * what was asked for (code `digest_mismatch`). */
export class DigestMismatch extends CountersignError {
  constructor(callId: string, readonly serverDigest: string, readonly localDigest: string) {
    super('digest_mismatch', `the console's digest ${serverDigest} for ${callId} is not ${localDigest}, the digest of the call as proposed`, { callId });
  }
}

/** The call ended without a grant: `code` is its status (denied, expired,
 * cancelled, countered). For a denial, `reason` and `by` say who refused it
 * and why. For a call an operator answered with an edited one (countered),
 * `counter` is that edited call and `changes` says, one phrase per member,
 * what the operator changed; the call did not run. */
export class NotApprovedError extends CountersignError {
  readonly call: Call;
  readonly by: string | undefined;
  readonly counter: CounteredBy | undefined;
  readonly changes: string[];

  constructor(call: Call) {
    let message: string;
    let reason: string | undefined;
    const changes = call.status === 'countered' && call.countered_by ? counterChanges(call, call.countered_by) : [];
    if (call.status === 'denied' && call.decision) {
      reason = call.decision.reason;
      message = `${call.decision.by} denied ${call.tool} on ${call.target}: ${reason}`;
    } else if (call.status === 'expired') {
      message = `nobody decided ${call.tool} on ${call.target} before ${call.decide_by}; propose it again if it is still needed`;
    } else if (call.status === 'countered' && call.countered_by) {
      const cb = call.countered_by;
      message =
        `an operator did not approve ${call.tool} on ${call.target} as it was and proposed an edited call instead: ${changes.join('; ')}. ` +
        `This call did not run and will not. To run the edited call, call the tool again with exactly these arguments: ${JSON.stringify(cb.envelope.args)}` +
        (cb.envelope.target !== call.target ? ` (target ${cb.envelope.target})` : '');
    } else {
      message = `${call.tool} on ${call.target} is ${call.status}`;
    }
    super(call.status, message, { reason, callId: call.id });
    this.call = call;
    this.by = call.decision?.by;
    this.counter = call.status === 'countered' ? call.countered_by : undefined;
    this.changes = changes;
  }

  /** Always: the call was denied, expired or cancelled. */
  override get refusal(): boolean {
    return true;
  }
}

/** The call was still pending when the wait ended (code `wait_timeout`). */
export class WaitTimeoutError extends CountersignError {
  constructor(readonly call: Call) {
    super('wait_timeout', `${call.id} is still pending: no operator has decided yet`, { callId: call.id });
  }
}

/** The console refused the grant (code = the reason: expired, replayed,
 * digest_mismatch, ...). The call must not run. */
export class RedemptionRejectedError extends CountersignError {
  constructor(readonly redemption: Redemption) {
    super(redemption.reason || 'rejected', redemption.message || `the grant was refused: ${redemption.reason}`, {
      status: redemption.statusCode,
      reason: redemption.reason,
      callId: redemption.call_id,
    });
  }

  /** True when the grant was refused for something the model can act on:
   * the call presented differs from the one approved (tool, target or
   * arguments), the grant expired, was revoked, was already used, or the
   * tool changed since. False when it points at the deployment, not the
   * call (another agent's token, a key or signature this console does not
   * accept, a clock ahead of the console's, a malformed grant, a reason this
   * client does not know): the application must see those. Either way the
   * call did not run. */
  override get refusal(): boolean {
    return REFUSED_GRANT_REASONS.has(this.reason ?? '');
  }
}

/** The reasons a rejected grant is the model's to act on. */
const REFUSED_GRANT_REASONS = new Set(['tool_mismatch', 'target_mismatch', 'digest_mismatch', 'expired', 'revoked', 'replayed', 'tool_changed']);

function describe(cause: unknown): string {
  if (cause instanceof Error) {
    const inner = (cause as { cause?: unknown }).cause;
    const code = inner && typeof inner === 'object' && 'code' in inner ? String((inner as { code: unknown }).code) : '';
    return code ? `${cause.message}: ${code}` : cause.message;
  }
  return String(cause);
}

/** What an operator changed from call to its counter-proposal cb, one
 * phrase per member: the target, and each top-level argument changed, set
 * or removed (values as JSON). */
export function counterChanges(call: Call, cb: CounteredBy): string[] {
  const out: string[] = [];
  if (cb.envelope.target !== call.target) out.push(`target ${JSON.stringify(call.target)} changed to ${JSON.stringify(cb.envelope.target)}`);
  const was = call.args as JsonObject;
  const now = cb.envelope.args as JsonObject;
  for (const [k, v] of Object.entries(now)) {
    if (!(k in was)) out.push(`${k} set to ${JSON.stringify(v)}`);
    else if (stable(was[k]) !== stable(v)) out.push(`${k} changed from ${JSON.stringify(was[k])} to ${JSON.stringify(v)}`);
  }
  for (const [k, v] of Object.entries(was)) if (!(k in now)) out.push(`${k} removed (was ${JSON.stringify(v)})`);
  return out;
}

/** JSON with every object's members in name order, to compare values. */
function stable(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stable).join(',')}]`;
  if (v !== null && typeof v === 'object')
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${stable((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  return JSON.stringify(v);
}
