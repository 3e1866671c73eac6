// The official TypeScript MCP SDK's client meeting counter-proposals at
// Countersign's MCP gateway (/mcp/demo), whose add tool forwards counters
// (counter: {edit: [/a, /b], forward: true}) and asks two people when a
// is above 100.
//
//   node counter.mjs URL TOKEN_FILE
//
// The Go test (e2e/mcp_ts_counter_test.go) plays the operators: when this
// script needs one it prints {"need", "call_id", "edits"} on one line and
// waits for "ok" on stdin. needs: "counter" (alice answers the call with
// the edits, in the browser console), "approve-as-editor" (alice approves
// the counter again, which must be refused), "approve" (bob approves it).
// Progress is printed as {"ok":STEP}; the last line is {"done":true}.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, tokenFile] = process.argv.slice(2);
const token = readFileSync(tokenFile, "utf8").trim();

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

async function ask(need, callId, edits) {
  say({ need, call_id: callId, edits });
  const { value, done } = await lines.next();
  assert.ok(!done && value === "ok", `the operator answered ${value}`);
}

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("");

// held calls add(a, b) and, once the gateway's first progress message says
// which call it holds, runs whileHeld(callId, message) while the request
// stays held; it returns the answer.
async function held(client, a, b, whileHeld) {
  let during;
  const res = await client.callTool({ name: "add", arguments: { a, b } }, undefined, {
    timeout: 120000,
    resetTimeoutOnProgress: true,
    onprogress: (p) => {
      if (during) return;
      const m = /call (call_[a-z0-9]+) \((\d+) of (\d+) approvals\)/.exec(p.message ?? "");
      assert.ok(m, `progress message ${p.message}`);
      during = whileHeld(m[1], { given: Number(m[2]), required: Number(m[3]) });
    },
  });
  assert.ok(during, `the call was answered before it was held: ${text(res)}`);
  await during;
  return res;
}

async function main() {
  const client = new Client({ name: "countersign-e2e-counter", version: "1.0.0" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }),
  );

  // A narrowing edit (a lowered) runs in the request held for the
  // original: the result starts with what the operator changed.
  let res = await held(client, 40, 2, (id) => ask("counter", id, { "/a": "3" }));
  assert.equal(res.isError ?? false, false, text(res));
  assert.match(text(res), /^An operator changed this call before approving it: a changed from 40 to 3\./, text(res));
  assert.match(text(res), /5$/, text(res));
  say({ ok: "narrowing edit ran" });

  // A raising edit (b from 2 to 9) does not narrow: the model is told of
  // the counter, which waits for a person other than its editor.
  res = await held(client, 41, 2, (id) => ask("counter", id, { "/b": "9" }));
  let st = res.structuredContent;
  assert.equal(res.isError, true, text(res));
  assert.equal(st.status, "countered", text(res));
  assert.deepEqual(st.counter_args, { a: 41, b: 9 }, text(res));
  assert.match(text(res), /b changed from 2 to 9/, text(res));
  const counter = st.countered_by;
  res = await held(client, 41, 9, async (id, n) => {
    assert.equal(id, counter);
    assert.deepEqual(n, { given: 1, required: 2 }, "the non-narrowing counter's approvals");
    await ask("approve-as-editor", id);
    await ask("approve", id);
  });
  assert.equal(res.isError ?? false, false, text(res));
  assert.equal(text(res), "50");
  say({ ok: "non-narrowing edit ran after a second person" });

  // Lowering a below the rule's threshold narrows, but the original asked
  // two people: the counter still needs two.
  res = await held(client, 200, 1, (id, n) => {
    assert.deepEqual(n, { given: 0, required: 2 }, "the rule asks two people");
    return ask("counter", id, { "/a": "7" });
  });
  st = res.structuredContent;
  assert.equal(st.status, "countered", `a lowered requirement ran on one approval: ${text(res)}`);
  res = await held(client, 7, 1, async (id, n) => {
    assert.equal(id, st.countered_by);
    assert.deepEqual(n, { given: 1, required: 2 }, "the lowered counter's approvals");
    await ask("approve", id);
  });
  assert.equal(res.isError ?? false, false, text(res));
  assert.equal(text(res), "8");
  say({ ok: "lowered edit kept the original's requirement" });
  await client.close();
  say({ done: true });
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`FAIL: ${e.stack ?? e}\n`);
    process.exit(1);
  },
);
