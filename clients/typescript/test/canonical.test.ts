// The canonical form and digest, offline.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { canonicalEnvelope, canonicalize, digestOf, DigestError, envelope, validToolName, without } from '../src/index.js';
import { REPO, TESTDATA } from './harness.js';

function refused(fn: () => unknown): DigestError {
  try {
    fn();
  } catch (e) {
    assert.ok(e instanceof DigestError, `want DigestError, got ${e}`);
    return e;
  }
  assert.fail('not refused');
}

const pairs = (e: DigestError) => e.problems.map((p) => [p.code, p.path]);

test('numbers at number paths are written as the vectors made by node say', () => {
  // The same file the Python suite checks its own formatter against.
  const view = new DataView(new ArrayBuffer(8));
  let n = 0;
  for (const line of readFileSync(join(TESTDATA, 'ecmascript-numbers.txt'), 'utf8').split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const [bits, want] = line.split(' ') as [string, string];
    view.setBigUint64(0, BigInt('0x' + bits));
    const x = view.getFloat64(0);
    if (Number.isInteger(x) && !Number.isSafeInteger(x)) {
      assert.equal(refused(() => canonicalize({ x }, { numberPaths: ['/x'] })).code, 'out_of_range', bits);
    } else {
      assert.equal(canonicalize({ x }, { numberPaths: ['/x'] }), `{"x":${want}}`, bits);
    }
    n++;
  }
  assert.ok(n > 7000, 'the vector file shrank');
});

test('non-integers only where the schema declares a number', () => {
  const env = envelope('agent:a', 'mcp-gateway', 'weather/get_forecast', 'mcp:weather', { lat: 52.52, lon: 13.4, days: 3, scale: 2.5e-7 });
  assert.match(canonicalEnvelope(env, { numberPaths: ['/args/lat', '/args/lon', '/args/scale'] }), /"args":\{"days":3,"lat":52.52,"lon":13.4,"scale":2.5e-7\}/);
  let e = refused(() => digestOf(env, { numberPaths: ['/args/lat', '/args/lon'] }));
  assert.deepEqual([e.code, pairs(e)], ['float_not_allowed', [['float_not_allowed', '/args/scale']]]);
  e = refused(() => digestOf(env));
  assert.equal(e.code, 'invalid_arguments');
  assert.deepEqual(pairs(e).map((p) => p[1]).sort(), ['/args/lat', '/args/lon', '/args/scale']);
  const points = { points: [{ x: 0.5, y: 1.25 }, { x: 1e-7, y: 2 }] };
  assert.equal(canonicalize(points, { numberPaths: ['/points/*/x', '/points/*/y'] }), '{"points":[{"x":0.5,"y":1.25},{"x":1e-7,"y":2}]}');
  assert.equal(canonicalize(points, { numberPaths: (p) => /\/[xy]$/.test(p) }), '{"points":[{"x":0.5,"y":1.25},{"x":1e-7,"y":2}]}');
  // * is every item of an array, and an index names nothing.
  assert.deepEqual(pairs(refused(() => canonicalize(points, { numberPaths: ['/points/0/x', '/points/*/y'] }))), [
    ['float_not_allowed', '/points/0/x'],
    ['float_not_allowed', '/points/1/x'],
  ]);
  assert.deepEqual(pairs(refused(() => canonicalize({ o: { x: 0.5 } }, { numberPaths: ['/*/x'] }))), [['float_not_allowed', '/o/x']]);
  // An integral value is the integer, under the integer limit.
  assert.equal(canonicalize({ a: 1.0, b: -0 }, { numberPaths: ['/a', '/b'] }), '{"a":1,"b":0}');
  for (const x of [1e16, 2 ** 53, -1e300, 1e21]) assert.deepEqual(pairs(refused(() => canonicalize({ t: x }, { numberPaths: ['/t'] }))), [['out_of_range', '/t']]);
});

test('what JavaScript holds and JSON cannot say is refused', () => {
  const cases: Array<[unknown, string, string]> = [
    [{ a: NaN }, 'malformed_json', '/args/a'],
    [{ a: -Infinity }, 'malformed_json', '/args/a'],
    [{ a: undefined }, 'wrong_type', '/args/a'],
    [{ a: [1, undefined] }, 'wrong_type', '/args/a/1'],
    [{ a: 10n }, 'wrong_type', '/args/a'],
    [{ a: new Date(0) }, 'wrong_type', '/args/a'],
    [{ a: new Map() }, 'wrong_type', '/args/a'],
    [{ a: () => 1 }, 'wrong_type', '/args/a'],
    [{ a: 0.1 + 0.2 }, 'float_not_allowed', '/args/a'],
    [{ a: Number.MAX_SAFE_INTEGER + 1 }, 'out_of_range', '/args/a'],
    [{ a: ['x', '\udfff'] }, 'invalid_utf8', '/args/a/1'],
    [{ '\ud83d': 1 }, 'invalid_utf8', '/args'],
  ];
  for (const [args, code, path] of cases) {
    const e = refused(() => digestOf(envelope('agent:a', 'h', 'a.b', 't', args as never)));
    assert.deepEqual(pairs(e), [[code, path]], String(path));
    assert.equal(e.status, undefined, 'nothing was sent');
  }
  assert.equal(canonicalize(Object.assign(Object.create(null), { b: 1, a: 2 })), '{"a":2,"b":1}');
});

test('every problem of an envelope is listed, in the API error shape', () => {
  const env = { v: 2, actor: 'agent:a', audience: 'h', tool: 'Bad', target: '  ', args: { f: 0.5, s: '\ud800' }, rationale: 'no' };
  const e = refused(() => digestOf(env as never));
  assert.equal(e.code, 'invalid_arguments');
  assert.deepEqual(pairs(e).map((p) => p.join(' ')).sort(), [
    'empty_string /target',
    'float_not_allowed /args/f',
    'invalid_tool /tool',
    'invalid_utf8 /args/s',
    'unknown_field /rationale',
    'wrong_type /v',
  ]);
  const shape = JSON.parse(JSON.stringify(e)) as { error: Record<string, unknown> };
  assert.deepEqual(Object.keys(shape.error).sort(), ['code', 'message', 'problems']);
  assert.ok(e.hasProblem('invalid_tool', '/tool') && !e.hasProblem('invalid_tool', '/target'));
  const missing = refused(() => digestOf({ v: 1, actor: 'a' } as never));
  assert.deepEqual(pairs(missing).map((p) => p[1]).sort(), ['/args', '/audience', '/target', '/tool']);
});

test('depth', () => {
  const nest = (n: number) => {
    let v: Record<string, unknown> = {};
    for (let i = 1; i < n; i++) v = { a: v };
    return v;
  };
  digestOf(envelope('a', 'b', 'a.b', 't', nest(32) as never));
  assert.deepEqual(pairs(refused(() => digestOf(envelope('a', 'b', 'a.b', 't', nest(33) as never)))), [['too_deep', '/args' + '/a'.repeat(32)]]);
});

test('tool names', () => {
  for (const ok of ['payments.refund', 'a', 'a1_b.c2', 'weather/get_forecast', 'srv-1/Tool.Name-2']) assert.ok(validToolName(ok), ok);
  for (const bad of ['', 'A.b', 'a..b', 'a.', '.a', '1a', 'a-b', 'a/', '/a', 'A/b', 'a/b/c', 'a'.repeat(129)]) assert.ok(!validToolName(bad), bad);
});

test('members sort by UTF-16 code units, strings escape minimally', () => {
  assert.equal(canonicalize({ '｡': 2, '😀': 1, a: 0, é: 3 }), '{"a":0,"é":3,"😀":1,"｡":2}');
  assert.equal(canonicalize('"\\/\b\f\n\r\t\u0000\u001f\u007f\u2028<>&é😀'), '"\\"\\\\/\\b\\f\\n\\r\\t\\u0000\\u001f\u007f\u2028<>&é😀"');
});

test('the worked example of docs/canonical.md', () => {
  const doc = readFileSync(join(REPO, 'docs', 'canonical.md'), 'utf8');
  const block = (name: string) => new RegExp(`<!-- example:${name} -->\\n\`\`\`[a-z]*\\n([\\s\\S]*?)\`\`\``).exec(doc)![1]!;
  const ctx = Object.fromEntries(block('context').trim().split('\n').map((l) => l.split(/:\s+/, 2).map((s) => s.trim()) as [string, string])) as Record<string, string>;
  // "actor:    agent:billing-bot" splits at the first colon followed by spaces
  const p = JSON.parse(block('proposal')) as { tool: string; target: string; args: never };
  const env = envelope(ctx.actor!, ctx.audience!, p.tool, p.target, p.args);
  assert.equal(canonicalEnvelope(env), block('canonical').trim());
  assert.equal(digestOf(env), block('digest').trim());
});

test('without removes informational members from a copy', () => {
  const args = { notes: 'x', a: { b: 1, c: 2 }, l: [{ b: 1 }] };
  assert.deepEqual(without(args, ['/notes', '/a/b', '/l/0/b', '/missing/x']), { a: { c: 2 }, l: [{ b: 1 }] });
  assert.equal(args.notes, 'x');
  assert.deepEqual(without({ 'a/b': 1, '~': 2 }, ['/a~1b', '/~0']), {});
});
