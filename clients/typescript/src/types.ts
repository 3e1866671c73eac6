/** Wire types of Countersign's agent API (v1), named as in the API. */

/** A JSON value as the console accepts it: numbers are integers within
 * ±(2^53−1), except at the number paths of a tool mirrored from MCP. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [name: string]: JsonValue };
/** A JSON object. */
export type JsonObject = { [name: string]: JsonValue };

/** Where a call is in its life. Every status but pending and approved is
 * terminal; an approved call moves only to redeemed, or to revoked when an
 * operator revokes its grant before it is redeemed (see Call.revocation). */
export type Status = 'pending' | 'approved' | 'denied' | 'expired' | 'cancelled' | 'redeemed' | 'revoked' | 'countered';

/** What became of an approved call's grant: live (it can still be
 * redeemed), expired (it ran out unredeemed; the status stays approved, but
 * the call runs only if proposed again), revoked or redeemed. */
export type GrantState = 'live' | 'expired' | 'revoked' | 'redeemed';

/** The outcome statuses an executor reports. */
export type OutcomeStatus = 'succeeded' | 'failed' | 'unknown';

/** What a person found about a call whose outcome was unknown or whose
 * lease expired. */
export type Verdict = 'executed' | 'not_executed';

/** POST /api/v1/calls: what an agent asks to run. */
export interface Proposal {
  tool: string;
  target: string;
  args: JsonObject;
  /** The agent's own words for the operator; never hashed. */
  rationale?: string;
}

/** The call presented with a grant at redemption: exactly the approved
 * tool, target and args. */
export interface CallSpec {
  tool: string;
  target: string;
  args: JsonObject;
}

/** POST /api/v1/redeem. */
export interface RedeemRequest {
  grant: string;
  call: CallSpec;
}

/** POST /api/v1/calls/{id}/outcome. */
export interface OutcomeRequest {
  status: OutcomeStatus;
  detail?: string;
}

export interface Approvals {
  required: number;
  received: number;
  /** Each approval, in the order given; absent until the first. */
  given?: GivenApproval[];
}

/** How an approval was given: on the call's page, signed with the
 * operator's passkey, on a batch review page, with `console approve`, by a
 * rule of the tools file, or by an allowance an operator gave. */
export type ApprovalMethod = 'click' | 'passkey' | 'batch' | 'command' | 'policy' | 'allowance' | (string & {});

/** Whether a person saw the call before approving it: 'true' on a page
 * whose presentation the console checked, 'false' for a rule or an
 * allowance, 'unattested' for a command (a person's name, no proof of what
 * they saw). */
export type Human = 'true' | 'false' | 'unattested';

/** The page that presented a call to its approver, and when it was
 * rendered. */
export interface Presented {
  page: 'call' | 'batch' | 'allowance';
  at: string;
}

/** One approval of a call. */
export interface GivenApproval {
  /** The operator as people see them (a local account's name; a
   * single-sign-on operator's provider user name, else display name, else
   * "(single sign-on user)"; never an oidc:HOST/SUB principal), or policy:
   * and the rule's id. */
  by: string;
  /** Where it came from: web, cli, policy or allowance. */
  channel: string;
  method: ApprovalMethod;
  human: Human;
  /** The digest approved: always the call's. */
  digest: string;
  /** The batch or allowance that made the approval, when one did. */
  via?: string;
  presented?: Presented;
  at: string;
  /** The person on whose behalf `by` approved, through a delegation. */
  for?: string;
}

/** One step of a call's lineage: who, when and the digest it concerned;
 * the API token's id for the proposal and the redemption, the verdict,
 * method and human of a decision, the page of a presentation. */
export interface Step {
  by: string;
  at: string;
  digest?: string;
  token?: string;
  verdict?: 'approved' | 'denied';
  method?: ApprovalMethod;
  human?: Human;
  via?: string;
  page?: 'call' | 'batch' | 'allowance';
  /** The delegator of a decision given through a delegation. */
  for?: string;
}

/** A call from proposal to outcome: every approval's digest and the
 * redeemed digest are the proposed one. */
export interface Lineage {
  proposed: Step;
  presented?: Step[];
  decided?: Step[];
  redeemed?: Step;
  outcome?: Outcome;
  resolution?: Resolution;
}

/** An operator's denial: who, why, when. */
export interface Decision {
  /** The operator, named as in GivenApproval.by, or policy:RULE. */
  by: string;
  reason: string;
  at: string;
}

/** An operator's revocation of an approved call's grant before it was
 * redeemed: who, why, when. The grant is refused at redemption (revoked)
 * from then on; hand the reason to the model as a denial's. */
export interface Revocation {
  /** The operator, named as in GivenApproval.by. */
  by: string;
  reason: string;
  at: string;
}

export interface Outcome {
  /** succeeded, failed or unknown as reported, or lease_expired when nobody
   * reported before the executor's lease ended. */
  status: string;
  detail?: string;
  /** When the outcome was reported or the lease ran out (RFC 3339). */
  at?: string;
}

/** The API's call object (times are RFC 3339 strings). */
/** The counter-proposal a countered call names: the edited call's id,
 * envelope and digest. */
export interface CounteredBy {
  id: string;
  envelope: { v: number; actor: string; audience: string; tool: string; target: string; args: Record<string, unknown> };
  digest: string;
}

export interface Call {
  id: string;
  status: Status;
  actor: string;
  audience: string;
  tool: string;
  target: string;
  /** The arguments as the console stored them. */
  args: JsonObject;
  rationale?: string;
  /** Lowercase hex SHA-256 of the call's canonical envelope. */
  digest: string;
  created_at: string;
  /** When a pending call expires. */
  decide_by: string;
  approvals: Approvals;
  /** The people who run the agent (from its token when the call was made),
   * each once, named as people see them: account names (a single-sign-on
   * account by its provider user name, never an oidc:HOST/SUB principal)
   * and team:GROUP; none of them may approve the call. Absent when the
   * token names none. */
  owners?: string[];
  /** The signed single-use grant, while approved and not yet redeemed. */
  grant?: string;
  grant_expires_at?: string;
  /** Once the call was approved, what became of its grant when the console
   * answered; absent for a call never approved. */
  grant_state?: GrantState;
  /** On a call an operator countered (status `countered`): the edited call
   * to accept (Client.accept) or decline (Client.cancel). */
  countered_by?: CounteredBy;
  /** On a counter-proposal: the id of the call it answers. */
  countered_from?: string;
  /** On a counter-proposal: when its agent accepted it. */
  accepted_at?: string;
  /** On an item of a plan: the plan, the item's index and the plan's state. */
  plan?: PlanRef;
  /** Set when an operator denied the call. */
  decision?: Decision;
  /** Set when an operator revoked the grant before it was redeemed (status
   * revoked). */
  revocation?: Revocation;
  /** The notes operators left with their approvals, when any did. */
  comments?: ApprovalComment[];
  /** Set once the executor reported what happened, or its lease ended. */
  outcome?: Outcome;
  /** When the grant was redeemed (redeemed calls). */
  redeemed_at?: string;
  /** When the executor's lease ends or ended: report the outcome, or send
   * a heartbeat, before then. */
  lease_until?: string;
  /** Set once a person resolved an unknown or expired outcome. */
  resolution?: Resolution;
  /** The call from proposal to outcome. */
  lineage: Lineage;
}

/** A person's finding about a call whose outcome was unknown or whose
 * lease expired. */
export interface Resolution {
  verdict: Verdict;
  /** The operator, named as in GivenApproval.by. */
  by: string;
  note: string;
  at: string;
  /** An http(s) link to what the finding rests on, when given. */
  evidence?: string;
}

/** POST /api/v1/calls/{id}/heartbeat. */
export interface HeartbeatRequest {
  /** Whole seconds from now, at most the tool's outcome_within (its default). */
  extend_seconds?: number;
}

/** A heartbeat's answer. */
export interface Lease {
  call_id: string;
  /** When the executor's lease now ends (RFC 3339). */
  lease_until: string;
  /** The most one heartbeat extends it by, in seconds (the tool's outcome_within). */
  extend_max: number;
}

/** An operator's note with an approval. */
export interface ApprovalComment {
  /** The operator, named as in GivenApproval.by. */
  by: string;
  comment: string;
  at: string;
}

/** What submit returns: the call, and whether the console stored a new one
 * (201) or returned the same actor's identical pending or approved call (200). */
export interface Submitted extends Call {
  created: boolean;
}

/** One step of a redemption; `ok` is null when it was not reached. */
export interface Check {
  name: string;
  ok: boolean | null;
}

/** The API's answer to POST /api/v1/redeem. */
export interface RedemptionBody {
  decision: 'accepted' | 'rejected';
  call_id?: string;
  /** The rejection reason: malformed, bad_signature, unknown_key,
   * bad_claims, actor_mismatch, audience_mismatch, tool_mismatch,
   * target_mismatch, digest_mismatch, not_yet_valid, expired, revoked,
   * replayed, tool_changed, frozen. */
  reason?: string;
  message?: string;
  checks: Check[];
  /** Accepted only: the canonical envelope that was hashed, exactly; run
   * the call from these bytes, or check them. */
  envelope?: string;
  /** Accepted only: the digest of envelope. */
  digest?: string;
  /** Accepted only: when the executor's lease ends. */
  lease_until?: string;
  /** Accepted only: how long one heartbeat extends the lease, in seconds. */
  outcome_within?: number;
  /** Rejected as frozen only (503): the freeze's reason, and since when. */
  freeze?: { reason: string; since: string };
}

/** A redemption as this client returns it. A rejection is an answer, not
 * an exception: `accepted` is false and `reason` says which check failed. */
export interface Redemption extends RedemptionBody {
  accepted: boolean;
  /** 200 accepted, 403 rejected, 409 replayed. */
  statusCode: number;
}

/** GET /api/v1/keys: a JSON Web Key Set of Ed25519 keys. */
export interface KeySet {
  keys: Array<{ kty: 'OKP'; crv: 'Ed25519'; x: string; kid: string; alg?: string; use?: string }>;
}

/** Where a plan is in its life (docs/plans.md). */
export type PlanStatus = 'pending' | 'approved' | 'halted' | 'denied' | 'cancelled' | 'expired';

/** An item's plan: its id, the item's index (from 0), the plan's state and,
 * once approved, until when its items are minted. */
export interface PlanRef {
  id: string;
  index: number;
  state: PlanStatus;
  valid_until?: string;
}

/** A list of calls proposed together so that a person approves them once. */
export interface PlanProposal {
  items: CallSpec[];
  rationale: string;
  ordered?: boolean;
}

/** The API's plan object; each item is a call of its own. */
export interface Plan {
  id: string;
  status: PlanStatus;
  digest: string;
  ordered: boolean;
  rationale: string;
  created_at: string;
  decide_by: string;
  decided_at?: string;
  valid_until?: string;
  reason?: string;
  approvals: Approvals;
  items: Call[];
}
