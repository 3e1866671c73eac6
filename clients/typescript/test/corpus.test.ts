// Digest agreement with the console on the corpora in clients/testdata:
// every body of equivalence.txt gets the console's digest (`console
// digest`, the server's own code), every body of refusals.txt is refused
// here with the console's code at its pointer, and numbers.txt (an MCP
// tool's numbers) gives the console's digests and refusals.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { digestOf, DigestError, type Envelope } from '../src/index.js';
import { consoleDigest, readSections } from './harness.js';

function envelopeOf(body: string, actor: string, audience: string): Envelope {
  const p = JSON.parse(body) as Record<string, unknown>;
  const env: Record<string, unknown> = { v: 1, actor, audience };
  for (const k of ['tool', 'target', 'args']) if (k in p) env[k] = p[k];
  return env as unknown as Envelope;
}

function refusal(fn: () => unknown): string[] {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof DigestError, String(e));
    return e.problems.map((p) => `${p.code} ${p.path}`);
  }
  assert.fail('not refused');
}

const hasFraction = (v: unknown): boolean =>
  typeof v === 'number' ? !Number.isInteger(v) : v !== null && typeof v === 'object' ? Object.values(v).some(hasFraction) : false;

test('equivalence corpus: the console digest of every body, and each pair keeps its relation', () => {
  const header = /^(same|differ)\/([a-z0-9-]+)\/(a|b)((?: (?:actor|audience)=\S+)*)$/;
  const pairs = new Map<string, Record<string, string>>();
  for (const [h, body] of readSections('equivalence.txt')) {
    const m = header.exec(h);
    assert.ok(m, h);
    const ctx: Record<string, string> = { actor: 'agent:billing-bot', audience: 'payments-host' };
    for (const kv of m[4]!.trim().split(' ').filter(Boolean)) {
      const [k, v] = kv.split('=', 2) as [string, string];
      ctx[k] = v;
    }
    const server = consoleDigest(body, ctx.actor!, ctx.audience!);
    assert.equal(server.code, 0, server.out);
    const want = server.out.trim();
    assert.equal(digestOf(envelopeOf(body, ctx.actor!, ctx.audience!)), want, h);
    const key = `${m[1]}/${m[2]}`;
    pairs.set(key, { ...pairs.get(key), [m[3]!]: want });
  }
  const kinds = { same: 0, differ: 0 };
  for (const [name, sides] of pairs) {
    const kind = name.split('/')[0] as 'same' | 'differ';
    kinds[kind]++;
    assert.ok(sides.a && sides.b, name);
    if (kind === 'same') assert.equal(sides.a, sides.b, name);
    else assert.notEqual(sides.a, sides.b, name);
  }
  assert.ok(kinds.same >= 27 && kinds.differ >= 38, `the corpus shrank: ${JSON.stringify(kinds)}`);
});

test('refusal corpus: refused with the console code at its pointer', () => {
  let n = 0;
  for (const [h, body] of readSections('refusals.txt')) {
    const [code, path] = h.split(' ') as [string, string];
    const server = consoleDigest(body, 'agent:billing-bot', 'payments-host');
    assert.equal(server.code, 2, server.out);
    const problems = (JSON.parse(server.out) as { error: { problems: Array<{ code: string; path: string }> } }).error.problems;
    assert.deepEqual(problems.map((p) => `${p.code} ${p.path}`), [`${code} ${path}`], 'the console');
    assert.deepEqual(refusal(() => digestOf(envelopeOf(body, 'agent:billing-bot', 'payments-host'))), [`${code} ${path}`], h);
    n++;
  }
  assert.ok(n >= 27, 'the corpus shrank');
});

test('numbers corpus: an MCP tool numbers as the console digests them', () => {
  const header = /^([a-z0-9-]+) numbers=(\S+) (digest|refused)=(\S+)$/;
  let n = 0;
  for (const [h, body] of readSections('numbers.txt')) {
    const m = header.exec(h);
    assert.ok(m, h);
    const [, name, paths, kind, want] = m as unknown as [string, string, string, string, string];
    const env = envelopeOf(body, 'agent:mcp-bot', 'mcp-gateway');
    const numberPaths = paths.split(',');
    if (kind === 'digest') {
      assert.equal(digestOf(env, { numberPaths }), want, name);
      // Without the paths a fraction is refused. (1.0 and 2e3 are the
      // integers 1 and 2000 to JavaScript, so they need no path.)
      if (hasFraction(env.args)) refusal(() => digestOf(env));
    } else {
      const [code, ptr] = want.split(':') as [string, string];
      assert.deepEqual(refusal(() => digestOf(env, { numberPaths })), [`${code} ${ptr}`], name);
    }
    n++;
  }
  assert.ok(n >= 14, 'the corpus shrank');
});
