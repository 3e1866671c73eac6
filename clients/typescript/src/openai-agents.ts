/**
 * Countersign for the OpenAI Agents SDK for JavaScript (`@openai/agents`,
 * version 0.14): a `needsApproval` and `execute` pair for a function tool,
 * and a resolver that sends the run's interruptions to Countersign and
 * resumes the run with the operators' decisions.
 *
 * ```ts
 * import { Agent, run, tool } from '@openai/agents';
 * import { CountersignApprovals } from '@countersign/client/openai-agents';
 *
 * const approvals = new CountersignApprovals(Client.fromEnv());
 * const refund = tool({ name: 'refund', description: '…', parameters: z.object({...}),
 *   ...approvals.guard({ tool: 'payments.refund', target: 'invoice:INV-1042' }, async (a) => payments.refund(a)) });
 * const agent = new Agent({ name: 'billing', tools: [refund] });
 * const result = await approvals.resolve(await run(agent, 'Refund INV-1042'), (state) => run(agent, state));
 * ```
 *
 * The SDK's approval lives in the run state the application holds: anyone
 * who can edit or replay that state can approve a call. Here the decision
 * lives in the console: `resolve` approves an interruption in the run state
 * only after an operator approved exactly that call, and the tool's
 * `execute` runs only after redeeming the single-use grant for the
 * arguments it was called with. An approval made any other way (a forged or
 * replayed run state) finds no grant, and the tool does not run. A denial
 * rejects the interruption with the operator's reason as the message the
 * model reads; a counter-proposal rejects it with what the operator changed
 * and the edited call's arguments (calling the tool with exactly those runs
 * the edited call once approved), unless the guard's acceptCounter runs
 * the edited call at once.
 *
 * A failure that is not a refusal of the call (the agent's token unknown or
 * revoked, a tool the console does not know, a 5xx, an unreachable console:
 * see CountersignError.refusal) is never turned into a rejection or a tool
 * message the model reads: `resolve` throws it, and the guard's
 * `errorFunction` throws it out of the run.
 */

import type { RunContext, RunState, RunToolApprovalItem } from '@openai/agents';
import { Client } from './client.js';
import { CountersignError, NotApprovedError } from './errors.js';
import { propose, redeemAndRun, type GateOptions } from './gated.js';
import type { Call, JsonObject } from './types.js';

/** The part of a run result the resolver reads. */
export interface Interrupted<TState> {
  interruptions?: RunToolApprovalItem[];
  state: TState;
}

type Spec = Omit<GateOptions<JsonObject>, 'client'>;

/** Details the SDK passes to execute; the tool call and the run's signal are read. */
interface CallDetails {
  toolCall?: { callId?: string; arguments?: string };
  signal?: AbortSignal;
}

/** The tool was executed without a decision this process saw, and the
 * console holds no approval of the call either (code `not_approved`): a
 * refusal the model reads; the tool did not run. */
export class UnapprovedCallError extends CountersignError {
  constructor(call: Call) {
    super('not_approved', `no operator approved this call in Countersign (it is ${call.status}, ${call.id}); it did not run`, { callId: call.id });
  }

  override get refusal(): boolean {
    return true;
  }
}

/** The SDK's own text for a tool that threw (its defaultToolErrorFunction). */
function sdkToolErrorText(e: unknown): string {
  return `An error occurred while running the tool. Please try again. Error: ${e instanceof Error ? e.toString() : String(e)}`;
}

/**
 * The `errorFunction` of a gated tool: an error of Countersign that is not
 * a refusal of the call (see CountersignError.refusal) is thrown, so the
 * run rejects with it and the application sees it; anything else (a
 * refusal, or the tool's own error) becomes the message the model reads, in
 * the SDK's own words.
 */
export function toolErrorMessage(_ctx: unknown, e: unknown): string {
  if (e instanceof CountersignError && !e.refusal) throw e;
  return sdkToolErrorText(e);
}

/** The message a model reads when Countersign refused a call. */
export function rejectionMessage(e: unknown): string {
  if (e instanceof NotApprovedError) {
    if (e.code === 'denied') return `Denied by ${e.by ?? 'an operator'}: ${e.reason ?? ''}`.trim();
    if (e.code === 'countered') return `Countered: ${e.message}`;
    return `Not approved: ${e.message}`;
  }
  if (e instanceof CountersignError) return `Refused by Countersign: ${JSON.stringify(e.toJSON())}`;
  return String(e);
}

export class CountersignApprovals {
  /** Interruptions seen by needsApproval, by tool call id. */
  private readonly pending = new Map<string, Spec>();
  /** Calls an operator approved, by tool call id, until executed. */
  private readonly approved = new Map<string, Call>();

  constructor(
    private readonly client: Client,
    private readonly defaults: { timeoutMs?: number } = {},
  ) {}

  /**
   * The `needsApproval`, `execute` and `errorFunction` of a function tool
   * gated by Countersign: spread it into `tool({...})`. `execute` receives
   * exactly the arguments the console approved and redeemed, and the run's
   * abort signal (an abort that makes it throw is reported unknown; see
   * redeemAndRun). `errorFunction` (toolErrorMessage) throws an
   * operational failure out of the run and gives the model the SDK's usual
   * message for anything else; a tool that sets its own after the spread
   * should do the same.
   */
  guard<A extends JsonObject, R>(
    spec: GateOptions<A>,
    execute: (args: A, signal?: AbortSignal) => R | Promise<R>,
  ): {
    needsApproval: (ctx: RunContext, input: unknown, callId?: string) => Promise<boolean>;
    execute: (input: unknown, ctx?: RunContext, details?: CallDetails) => Promise<R>;
    errorFunction: (ctx: RunContext, error: unknown) => string;
  } {
    const s = { timeoutMs: this.defaults.timeoutMs, ...spec, client: undefined } as Spec;
    return {
      needsApproval: async (_ctx, _input, callId) => {
        if (callId) this.pending.set(callId, s);
        return true; // every call of a gated tool goes to an operator
      },
      execute: async (input, _ctx, details) => {
        const callId = details?.toolCall?.callId;
        let call = callId ? this.approved.get(callId) : undefined;
        if (callId) this.approved.delete(callId);
        const args = argsOf(details?.toolCall?.arguments, input);
        if (!call) {
          // No decision seen by this process (a run state resumed elsewhere,
          // or approved without Countersign): the console holds the truth.
          // The same actor's identical call is returned while it is still
          // approved; anything else is a new proposal that nobody approved yet.
          call = await this.client.submit(proposalOf(s, args), details?.signal);
          if (call.status !== 'approved') throw new UnapprovedCallError(call);
        }
        return redeemAndRun(this.client, call, execute as (a: JsonObject, signal?: AbortSignal) => R | Promise<R>, details?.signal, s);
      },
      errorFunction: toolErrorMessage,
    };
  }

  /**
   * Sends each interruption of a gated tool to Countersign, waits for the
   * decision, approves or rejects it in the run state, and resumes the run
   * with `resume(state)`, until the run no longer stops for a gated tool.
   * Interruptions of other tools are left for the caller. Only a refusal
   * (see CountersignError.refusal) rejects an interruption; any other
   * failure is thrown, the interruption left as it was.
   */
  async resolve<TState extends RunState<any, any>, TResult extends Interrupted<TState>>(
    result: TResult,
    resume: (state: TState) => Promise<TResult>,
    signal?: AbortSignal,
  ): Promise<TResult> {
    for (;;) {
      const ours = (result.interruptions ?? []).filter((item) => this.pending.has(callIdOf(item)));
      if (ours.length === 0) return result;
      for (const item of ours) {
        const callId = callIdOf(item);
        const spec = this.pending.get(callId)!;
        this.pending.delete(callId);
        try {
          const call = await propose({ ...spec, client: this.client }, argsOf(item.arguments, undefined), signal);
          this.approved.set(callId, call);
          result.state.approve(item);
        } catch (e) {
          if (e instanceof CountersignError && e.refusal) {
            result.state.reject(item, { message: rejectionMessage(e) });
          } else throw e;
        }
      }
      result = await resume(result.state);
    }
  }
}

function callIdOf(item: RunToolApprovalItem): string {
  const raw = item.rawItem as { callId?: string; id?: string };
  return raw.callId ?? raw.id ?? '';
}

function argsOf(text: string | undefined, parsed: unknown): JsonObject {
  // The model's own text, not a schema library's reading of it.
  if (text !== undefined) return JSON.parse(text) as JsonObject;
  return (parsed ?? {}) as JsonObject;
}

function proposalOf(spec: Spec, args: JsonObject) {
  const target = typeof spec.target === 'function' ? spec.target(args) : spec.target;
  const rationale = typeof spec.rationale === 'function' ? spec.rationale(args) : spec.rationale;
  return { tool: spec.tool, target, args, ...(rationale ? { rationale } : {}) };
}
