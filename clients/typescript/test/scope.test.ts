// Scope digests agree with the console's vectors in clients/testdata/scopes.txt.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { DigestError, scopeDigest } from '../src/index.js';
import type { JsonObject } from '../src/types.js';
import { TESTDATA } from './harness.js';

function vectors(): { name: string; scope: JsonObject; digest: string }[] {
  const lines = readFileSync(join(TESTDATA, 'scopes.txt'), 'utf8').split('\n');
  const out: { name: string; scope: JsonObject; digest: string }[] = [];
  lines.forEach((line, i) => {
    const m = /^-- ([a-z0-9-]+) digest=([0-9a-f]+) --$/.exec(line);
    if (m) out.push({ name: m[1]!, scope: JSON.parse(lines[i + 1]!) as JsonObject, digest: m[2]! });
  });
  return out;
}

test('scope digests match the console vectors, whatever the member order', () => {
  const vs = vectors();
  assert.ok(vs.length >= 6);
  for (const v of vs) {
    assert.equal(scopeDigest(v.scope), v.digest, v.name);
    const reversed = Object.fromEntries(Object.entries(v.scope).reverse()) as JsonObject;
    assert.equal(scopeDigest(reversed), v.digest, v.name);
  }
});

test('a scope the console would refuse has no digest', () => {
  const scope = vectors()[0]!.scope;
  assert.throws(() => scopeDigest({ ...scope, uses: 1.5 }), DigestError);
  assert.throws(() => scopeDigest({ ...scope, uses: 2 ** 53 }), DigestError);
});
