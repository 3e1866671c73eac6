/**
 * Countersign's TypeScript client: propose a tool call, wait for an
 * operator's decision, redeem the grant right before executing, and report
 * the outcome. No runtime dependencies (global fetch, node:crypto); Node 20+.
 *
 * Adapters: `@countersign/client/ai` (the Vercel AI SDK) and
 * `@countersign/client/openai-agents` (the OpenAI Agents SDK).
 */

export * from './types.js';
export * from './errors.js';
export { Client, decided, specOf, DEFAULT_MAX_OUTAGE_MS, DEFAULT_POLL_WAIT_MS, DEFAULT_REQUEST_TIMEOUT_MS } from './client.js';
export type { ClientOptions, VerifyOptions, WaitOptions } from './client.js';
export {
  DIGEST_PREFIX,
  SCOPE_DIGEST_PREFIX,
  canonicalEnvelope,
  canonicalize,
  digestOf,
  envelope,
  scopeDigest,
  validToolName,
  without,
} from './canonical.js';
export type { CanonicalOptions, Envelope, NumberPaths } from './canonical.js';
export { DEFAULT_MAX_HEARTBEAT_MS, Heartbeats, gated, propose, redeemAndRun } from './gated.js';
export type { GateOptions, LeaseOptions } from './gated.js';
