/**
 * Canonical form and digest of a call: RFC 8785 over the envelope, then
 * SHA-256 with the `countersign/v1/call:` prefix (docs/canonical.md).
 *
 * What the console refuses is refused here too, with its problem codes and
 * JSON Pointers, so no digest is computed for something the console would
 * not hash: a non-integer where the tool declares no number
 * (`float_not_allowed`), an integer outside ±(2^53−1) (`out_of_range`),
 * NaN or an infinity (`malformed_json`), a lone surrogate (`invalid_utf8`),
 * args nested more than 32 deep (`too_deep`), anything that is not JSON
 * (`wrong_type`: undefined, a bigint, a Date, a Map, a function), and an
 * envelope with a bad shape, tool name or target.
 */

import { createHash } from 'node:crypto';
import { DigestError, type Problem } from './errors.js';
import type { JsonObject } from './types.js';

export const DIGEST_PREFIX = 'countersign/v1/call:';
export const SCOPE_DIGEST_PREFIX = 'countersign/v1/scope:';
export const MAX_ARGS_DEPTH = 32;
export const MAX_TOOL_BYTES = 128;
export const MAX_TARGET_BYTES = 512;

/** The envelope that is hashed. */
export interface Envelope {
  v: 1;
  actor: string;
  audience: string;
  tool: string;
  target: string;
  args: JsonObject;
}

/**
 * Where a tool's schema declares a number (only tools mirrored from MCP):
 * JSON Pointers from the envelope's root such as `/args/lat`, with `*` for
 * every item of an array (`/args/points/*\/x`); or a function of the pointer.
 */
export type NumberPaths = readonly string[] | ((pointer: string) => boolean);

export interface CanonicalOptions {
  numberPaths?: NumberPaths;
}

/** Builds an envelope; actor and audience are the token's (a Call has them). */
export function envelope(actor: string, audience: string, tool: string, target: string, args: JsonObject): Envelope {
  return { v: 1, actor, audience, tool, target, args };
}

interface NumberNode {
  accepts(pointer: string): boolean;
  member(name: string): NumberNode | undefined;
  item(): NumberNode | undefined;
}

class NumberTree implements NumberNode {
  here = false;
  members = new Map<string, NumberTree>();
  items: NumberTree | undefined;
  accepts(): boolean {
    return this.here;
  }
  member(name: string): NumberTree | undefined {
    return this.members.get(name);
  }
  item(): NumberTree | undefined {
    return this.items;
  }
}

function numberNode(paths: NumberPaths | undefined): NumberNode | undefined {
  if (paths === undefined) return undefined;
  if (typeof paths === 'function') {
    const node: NumberNode = { accepts: (p) => Boolean(paths(p)), member: () => node, item: () => node };
    return node;
  }
  if (typeof paths === 'string') throw new TypeError('numberPaths is a list of JSON Pointers, not one string');
  const root = new NumberTree();
  for (const p of paths) {
    if (p !== '' && !p.startsWith('/')) throw new TypeError(`${JSON.stringify(p)} is not a JSON Pointer`);
    let n = root;
    for (const raw of p === '' ? [] : p.slice(1).split('/')) {
      if (raw === '*') {
        n.items ??= new NumberTree();
        n = n.items;
      } else {
        const seg = raw.replace(/~1/g, '/').replace(/~0/g, '~');
        let c = n.members.get(seg);
        if (!c) {
          c = new NumberTree();
          n.members.set(seg, c);
        }
        n = c;
      }
    }
    n.here = true;
  }
  return root;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const CONTROL_OR_FORMAT = /[\p{Cc}\p{Cf}]/u;
// Go's unicode.IsSpace: the Latin-1 spaces and the White_Space property.
const BLANK = /^[\t\n\v\f\r \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]*$/;
const TOOL_DOTTED = /^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/;
const TOOL_MIRRORED = /^[a-z][a-z0-9-]{0,62}\/[A-Za-z0-9_.-]{1,128}$/;
const PARSE_CODES = new Set(['malformed_json', 'invalid_utf8', 'duplicate_key', 'float_not_allowed', 'out_of_range', 'too_deep', 'too_large']);
const ENVELOPE_MEMBERS = ['v', 'actor', 'audience', 'tool', 'target', 'args'] as const;

const utf8Length = (s: string) => Buffer.byteLength(s, 'utf8');
const escapePointer = (name: string) => name.replace(/~/g, '~0').replace(/\//g, '~1');
const typeName = (v: unknown) =>
  v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'object' ? (Object.getPrototypeOf(v)?.constructor?.name ?? 'an object') : `a ${typeof v}`;

/** Whether tool is a name the console accepts: dotted lower-case words
 * (payments.refund), or {server}/{tool} for a tool mirrored from MCP. */
export function validToolName(tool: string): boolean {
  return utf8Length(tool) <= MAX_TOOL_BYTES && (TOOL_DOTTED.test(tool) || TOOL_MIRRORED.test(tool));
}

class Encoder {
  problems: Problem[] = [];
  out: string[] = [];

  problem(code: string, path: string, message: string): void {
    this.problems.push({ code, path, message });
  }

  string(s: string, path: string): void {
    const m = LONE_SURROGATE.exec(s);
    if (m) {
      this.problem('invalid_utf8', path, `lone surrogate \\u${m[0].charCodeAt(0).toString(16)}: a string must be valid Unicode`);
      return;
    }
    // JSON.stringify of a well-formed string is RFC 8785's string form:
    // ", \ and controls escaped (\b \f \n \r \t, else \u00xx), the rest raw.
    this.out.push(JSON.stringify(s));
  }

  value(v: unknown, path: string, depth: number, num: NumberNode | undefined): void {
    switch (typeof v) {
      case 'boolean':
        this.out.push(v ? 'true' : 'false');
        return;
      case 'string':
        this.string(v, path);
        return;
      case 'number':
        this.number(v, path, num);
        return;
      case 'object':
        if (v === null) {
          this.out.push('null');
          return;
        }
        if (Array.isArray(v)) {
          this.container(path, depth);
          this.out.push('[');
          v.forEach((item, i) => {
            if (i) this.out.push(',');
            const child = `${path}/${i}`;
            this.value(item, child, depth + 1, num?.item());
          });
          this.out.push(']');
          return;
        }
        const proto = Object.getPrototypeOf(v);
        if (proto === Object.prototype || proto === null) {
          this.container(path, depth);
          this.object(v as Record<string, unknown>, path, depth + 1, num);
          return;
        }
        break;
    }
    this.problem('wrong_type', path, `${typeName(v)} is not a JSON value (use objects, arrays, strings, numbers, booleans and null)`);
  }

  container(path: string, depth: number): void {
    // depth counts containers from args, args itself being 1.
    if (depth === MAX_ARGS_DEPTH + 1) this.problem('too_deep', path, `args nest more than ${MAX_ARGS_DEPTH} containers deep`);
  }

  number(x: number, path: string, num: NumberNode | undefined): void {
    if (!Number.isFinite(x)) {
      this.problem('malformed_json', path, `${x} is not a JSON number`);
    } else if (Number.isInteger(x)) {
      // At a number path an integral value is the integer, under the same limit.
      if (Number.isSafeInteger(x)) this.out.push(String(x));
      else this.problem('out_of_range', path, `${x} is outside ±${Number.MAX_SAFE_INTEGER}: use a string, or smaller units`);
    } else if (num?.accepts(path)) {
      this.out.push(String(x)); // Number::toString, as RFC 8785 requires
    } else {
      this.problem('float_not_allowed', path, `${x} is not an integer; only integers are accepted here (money is an integer in minor units)`);
    }
  }

  object(o: Record<string, unknown>, path: string, depth: number, num: NumberNode | undefined): void {
    const names: string[] = [];
    for (const name of Object.keys(o)) {
      if (LONE_SURROGATE.test(name)) this.problem('invalid_utf8', path, `member name ${JSON.stringify(name)} holds a lone surrogate`);
      else names.push(name);
    }
    names.sort(); // by UTF-16 code units, as RFC 8785 requires
    this.out.push('{');
    names.forEach((name, i) => {
      if (i) this.out.push(',');
      this.out.push(JSON.stringify(name) + ':');
      const child = `${path}/${escapePointer(name)}`;
      this.value(o[name], child, depth, num?.member(name));
    });
    this.out.push('}');
  }
}

function refuse(problems: Problem[]): DigestError {
  const only = problems.length === 1 ? problems[0] : undefined;
  if (only && PARSE_CODES.has(only.code)) return new DigestError(only.code, only.message, { problems });
  const message = problems.length === 1 ? '1 problem in the envelope' : `${problems.length} problems in the envelope`;
  return new DigestError('invalid_arguments', message, { problems });
}

/** The RFC 8785 text of a JSON value. Throws DigestError listing every
 * problem. */
export function canonicalize(value: unknown, options: CanonicalOptions = {}): string {
  const enc = new Encoder();
  enc.value(value, '', 1, numberNode(options.numberPaths));
  if (enc.problems.length) throw refuse(enc.problems);
  return enc.out.join('');
}

function checkEnvelope(env: unknown): Problem[] {
  const problems: Problem[] = [];
  const add = (code: string, path: string, message: string) => problems.push({ code, path, message });
  if (env === null || typeof env !== 'object' || Array.isArray(env)) {
    add('wrong_type', '', 'the envelope must be an object with v, actor, audience, tool, target and args');
    return problems;
  }
  const e = env as Record<string, unknown>;
  for (const name of Object.keys(e)) {
    if (!(ENVELOPE_MEMBERS as readonly string[]).includes(name))
      add('unknown_field', '/' + escapePointer(name), `${JSON.stringify(name)} is not a member of an envelope (allowed: ${ENVELOPE_MEMBERS.join(', ')})`);
  }
  for (const name of ENVELOPE_MEMBERS) if (!(name in e)) add('missing_field', '/' + name, `${name} is required`);
  if ('v' in e && e.v !== 1) add('wrong_type', '/v', 'v must be the integer 1');
  for (const name of ['actor', 'audience', 'tool', 'target'] as const) {
    if (name in e && typeof e[name] !== 'string') add('wrong_type', '/' + name, `${name} must be a string, not ${typeName(e[name])}`);
  }
  if (typeof e.tool === 'string' && !LONE_SURROGATE.test(e.tool) && !validToolName(e.tool))
    add('invalid_tool', '/tool', `tool must be dotted lower-case words like payments.refund, at most ${MAX_TOOL_BYTES} bytes`);
  if (typeof e.target === 'string' && !LONE_SURROGATE.test(e.target)) {
    const t = e.target;
    const bad = CONTROL_OR_FORMAT.exec(t);
    if (BLANK.test(t)) add('empty_string', '/target', 'target must not be empty or only white space');
    else if (utf8Length(t) > MAX_TARGET_BYTES) add('invalid_target', '/target', `target is ${utf8Length(t)} bytes; at most ${MAX_TARGET_BYTES} are allowed`);
    else if (bad)
      add('invalid_target', '/target', `target contains the invisible or control character U+${bad[0].codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}`);
  }
  if ('args' in e && (e.args === null || typeof e.args !== 'object' || Array.isArray(e.args))) add('wrong_type', '/args', `args must be an object, not ${typeName(e.args)}`);
  return problems;
}

/** The canonical bytes of an envelope (as text): what is hashed after the
 * prefix. Throws DigestError when the console would refuse it. */
export function canonicalEnvelope(env: Envelope, options: CanonicalOptions = {}): string {
  const problems = checkEnvelope(env);
  const enc = new Encoder();
  const e = env as unknown as Record<string, unknown>;
  if (e !== null && typeof e === 'object') {
    // Members in canonical order (ASCII names): actor, args, audience,
    // target, tool, v; args counts as the first container.
    const num = numberNode(options.numberPaths)?.member('args');
    enc.out.push('{');
    (['actor', 'args', 'audience', 'target', 'tool'] as const).forEach((name, i) => {
      enc.out.push((i ? ',' : '') + JSON.stringify(name) + ':');
      const v = e[name];
      if (name === 'args') {
        if (v !== null && typeof v === 'object' && !Array.isArray(v)) enc.value(v, '/args', 1, num);
      } else if (typeof v === 'string') enc.string(v, '/' + name);
    });
    enc.out.push(',"v":1}');
  }
  problems.push(...enc.problems);
  if (problems.length) throw refuse(problems);
  return enc.out.join('');
}

/** The digest of an envelope: lowercase hex SHA-256 of
 * `countersign/v1/call:` and its canonical bytes. Throws DigestError, with
 * the console's codes and pointers, for anything the console refuses. */
export function digestOf(env: Envelope, options: CanonicalOptions = {}): string {
  return createHash('sha256').update(DIGEST_PREFIX + canonicalEnvelope(env, options), 'utf8').digest('hex');
}

/** The digest of an allowance's scope (docs/allowances.md): lowercase hex
 * SHA-256 of `countersign/v1/scope:` and the RFC 8785 bytes of the
 * materialised scope, as the console shows it with the scope in words.
 * Throws DigestError for anything that is not JSON the console accepts. */
export function scopeDigest(scope: JsonObject): string {
  if (scope === null || typeof scope !== 'object' || Array.isArray(scope)) {
    throw new TypeError('a scope is a JSON object');
  }
  return createHash('sha256').update(SCOPE_DIGEST_PREFIX + canonicalize(scope), 'utf8').digest('hex');
}

/** A copy of args without the members the JSON Pointers (relative to args,
 * such as `/notes`) name: the tool's informational members, which the
 * digest leaves out. Only members reached through objects are removed. */
export function without(args: JsonObject, pointers: readonly string[]): JsonObject {
  const out = structuredClone(args);
  for (const p of pointers) {
    if (!p.startsWith('/')) throw new TypeError(`${JSON.stringify(p)} is not a JSON Pointer into args`);
    const segs = p.slice(1).split('/').map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    let node: unknown = out;
    for (const s of segs.slice(0, -1)) {
      node = node !== null && typeof node === 'object' && !Array.isArray(node) ? (node as Record<string, unknown>)[s] : undefined;
    }
    if (node !== null && typeof node === 'object' && !Array.isArray(node)) delete (node as Record<string, unknown>)[segs[segs.length - 1]!];
  }
  return out;
}
