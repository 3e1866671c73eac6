// The official TypeScript MCP SDK's client driving Countersign's MCP gateway
// at /mcp/demo, in front of the example upstream (examples/mcpdemo).
//
//   node run.mjs http  URL TOKEN_FILE
//   node run.mjs stdio URL TOKEN_FILE CONSOLE_BINARY   (through console mcp-bridge)
//
// The Go test (e2e/mcp_ts_test.go) plays the operator: when this script
// needs a decision it prints {"need":"approve"|"deny","call_id","digest"} on
// one line and waits for "ok" on stdin. Progress is printed as {"ok":STEP};
// the last line is {"done":true}. Any failed check exits 1 with the reason on
// stderr.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import {
  ElicitationCompleteNotificationSchema,
  ElicitRequestSchema,
  ErrorCode,
  LATEST_PROTOCOL_VERSION,
  McpError,
} from "@modelcontextprotocol/sdk/types.js";

const [mode, url, tokenFile, consoleBin] = process.argv.slice(2);
const token = readFileSync(tokenFile, "utf8").trim();

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (o) => process.stdout.write(JSON.stringify(o) + "\n");

// ask has the Go test decide a call, and waits until it has.
async function ask(need, st, reason) {
  say({ need, call_id: st.call_id, digest: st.digest, reason });
  const { value, done } = await lines.next();
  assert.ok(!done && value === "ok", `the operator answered ${value}`);
}

function transport() {
  if (mode === "http") {
    return new StreamableHTTPClientTransport(new URL(url), {
      requestInit: { headers: { Authorization: `Bearer ${token}` } },
    });
  }
  assert.equal(mode, "stdio");
  return new StdioClientTransport({
    command: consoleBin,
    args: ["mcp-bridge", "--url", url, "--token-file", tokenFile],
    stderr: "inherit",
  });
}

// connect opens a session and returns the client and every message it
// received, so the negotiated protocol version can be read.
async function connect(capabilities = {}) {
  const t = transport();
  const seen = [];
  const start = t.start.bind(t);
  t.start = async () => {
    const onmessage = t.onmessage;
    t.onmessage = (msg, extra) => {
      seen.push(msg);
      onmessage?.(msg, extra);
    };
    return start();
  };
  const client = new Client({ name: "countersign-e2e", version: "1.0.0" }, { capabilities });
  await client.connect(t);
  return { client, seen };
}

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("");

async function main() {
  const { client, seen } = await connect();
  const init = seen.find((m) => m.result?.protocolVersion);
  assert.equal(init.result.protocolVersion, LATEST_PROTOCOL_VERSION);
  assert.equal(LATEST_PROTOCOL_VERSION, "2025-11-25");
  say({ ok: "connected", protocol: init.result.protocolVersion });

  // The upstream's tools under their own names; the free-form one is
  // quarantined and not offered.
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name).sort();
  assert.deepEqual(names, ["add", "big_result", "create_order", "echo", "fail", "scale"]);
  assert.equal(tools.find((t) => t.name === "add").description, "Adds two integers.");
  say({ ok: "listed" });

  // A call is held for an operator; the client's progress token gets
  // strictly increasing progress until the answer, then none.
  const args = { s: "café", n: 9007199254740991, x: 0.1, tags: ["b", "a"] };
  const progress = [];
  let res = await client.callTool({ name: "echo", arguments: args }, undefined, {
    onprogress: (p) => progress.push(p.progress),
  });
  assert.equal(res.isError, true, text(res));
  let st = res.structuredContent;
  assert.equal(st.status, "approval_pending", text(res));
  assert.match(st.digest, /^[0-9a-f]{64}$/);
  await statusPage(st.approval_url, st.call_id, "pending");
  assert.ok(progress.length > 0, "no progress during the hold");
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i] > progress[i - 1], `progress ${progress}`);
  const seenProgress = progress.length;
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(progress.length, seenProgress, "progress after the answer");
  say({ ok: "held" });

  // Approved, the identical call runs; the upstream received exactly the
  // canonical bytes that were hashed.
  await ask("approve", st);
  res = await client.callTool({ name: "echo", arguments: { tags: ["b", "a"], x: 0.1, n: 9007199254740991, s: "café" } });
  assert.equal(res.isError ?? false, false, text(res));
  assert.equal(text(res), '{"n":9007199254740991,"s":"café","tags":["b","a"],"x":0.1}');
  say({ ok: "ran" });

  // Refused before anything waits: a float where the schema says integer.
  res = await client.callTool({ name: "add", arguments: { a: 1.5, b: 2 } });
  assert.equal(res.structuredContent.status, "invalid_arguments", text(res));
  assert.ok(res.structuredContent.problems.some((p) => p.code === "float_not_allowed" && p.path === "/args/a"), text(res));
  say({ ok: "refused" });

  // Denied: the operator's reason, now and when the call is re-issued.
  res = await client.callTool({ name: "add", arguments: { a: 2, b: 3 } });
  assert.equal(res.structuredContent.status, "approval_pending", text(res));
  await ask("deny", res.structuredContent, "not this one");
  res = await client.callTool({ name: "add", arguments: { a: 2, b: 3 } });
  assert.equal(res.structuredContent.status, "denied", text(res));
  assert.equal(res.structuredContent.reason, "not this one");
  assert.match(text(res), /not this one/);
  say({ ok: "denied" });

  // A result with integers no double holds: the text carries every digit.
  res = await client.callTool({ name: "big_result", arguments: {} });
  await ask("approve", res.structuredContent);
  res = await client.callTool({ name: "big_result", arguments: {} });
  assert.equal(res.isError ?? false, false, text(res));
  assert.match(text(res), /9007199254740993/);
  assert.match(text(res), /123456789012345678901234567890/);
  say({ ok: "big" });
  await client.close();

  // A client that takes URL elicitation is sent to the call's page, told
  // when the call is decided, and runs it by re-issuing it.
  const { client: elicit } = await connect({ elicitation: { url: {} } });
  elicit.setRequestHandler(ElicitRequestSchema, async () => ({ action: "cancel" }));
  let completed;
  const complete = new Promise((r) => (completed = r));
  elicit.setNotificationHandler(ElicitationCompleteNotificationSchema, (n) => completed(n.params.elicitationId));
  let err;
  try {
    await elicit.callTool({ name: "add", arguments: { a: 20, b: 22 } });
  } catch (e) {
    err = e;
  }
  assert.ok(err instanceof McpError && err.code === ErrorCode.UrlElicitationRequired, `got ${err}`);
  const el = err.data.elicitations[0];
  assert.equal(el.mode, "url");
  await statusPage(el.url, el.elicitationId, "pending");
  say({ ok: "elicited" });
  await ask("approve", { call_id: el.elicitationId });
  assert.equal(await complete, el.elicitationId);
  res = await elicit.callTool({ name: "add", arguments: { a: 20, b: 22 } });
  assert.equal(text(res), "42");
  say({ ok: "completed" });
  await elicit.close();
  say({ done: true });
}

// statusPage checks the page an approval_url or an elicitation points at:
// the call's status page, open without a login, and only with its token.
async function statusPage(link, callId, status) {
  assert.match(link, new RegExp(`/status/${callId}/[A-Za-z0-9_-]{43}$`));
  const page = await fetch(link);
  assert.equal(page.status, 200, link);
  const html = await page.text();
  assert.ok(html.includes(`data-testid="call-id">${callId}<`), "the status page names another call");
  assert.ok(html.includes(`data-testid="status-value">${status}<`), `the status page does not say ${status}`);
  const last = link.at(-1) === "A" ? "B" : "A";
  const wrong = await fetch(link.slice(0, -1) + last);
  assert.equal(wrong.status, 404, "a wrong token opens the status page");
  await wrong.text();
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`FAIL: ${e.stack ?? e}\n`);
    process.exit(1);
  },
);
