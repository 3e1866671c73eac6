// The latency that Countersign's MCP gateway adds to a tools/call approved
// at submission, measured from outside with the official TypeScript MCP
// SDK: the same client calls the example upstream's add directly and
// through one or more gateways in front of it, over Streamable HTTP, one
// call at a time, the targets alternating call by call so that the
// machine's load falls on all of them alike.
//
//   node latency.mjs CALLS TOKEN_FILE DIRECT_URL NAME=GATEWAY_URL...
//
// Every gateway's token is read from TOKEN_FILE.NAME. The arguments stay
// under the rule that approves small sums (a < 100, b < 100) and differ
// from call to call (up to 8,100 calls, and from the warm-up's). Prints
// one JSON line per target (p50, p90, p99, mean in ms) and, for each
// gateway, what it adds over the direct calls at p50 and p99. Any failed
// call exits 1. PAUSE_MS (default 0) waits that long after each call, so
// that what a target does after answering (a gateway writes a call's
// outcome after its answer) is not paid by the next target's call.
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [callsArg, tokenFile, directURL, ...gateways] = process.argv.slice(2);
const calls = Number(callsArg);
const pauseMs = Number(process.env.PAUSE_MS ?? 0);
const pause = () => new Promise((resolve) => setTimeout(resolve, pauseMs));
assert.ok(calls > 0 && directURL && gateways.length > 0, "usage: node latency.mjs CALLS TOKEN_FILE DIRECT_URL NAME=URL...");

async function connect(url, token) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const client = new Client({ name: "countersign-latency", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
  return client;
}

const targets = [{ name: "direct", client: await connect(directURL), ms: [] }];
for (const g of gateways) {
  const [name, url] = g.split(/=(.*)/s);
  const token = readFileSync(`${tokenFile}.${name}`, "utf8").trim();
  targets.push({ name, client: await connect(url, token), ms: [] });
}

async function add(t, a, b) {
  const start = process.hrtime.bigint();
  const res = await t.client.callTool({ name: "add", arguments: { a, b } });
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  const text = res.content.filter((c) => c.type === "text").map((c) => c.text).join("");
  if (res.isError || text !== String(a + b)) {
    throw new Error(`${t.name}: add(${a}, ${b}) answered ${JSON.stringify(res)}`);
  }
  return ms;
}

// A few calls each first: connections, the SDK's code and the servers'
// caches warm up outside the measurement.
for (let i = 0; i < 5; i++) {
  for (const t of targets) await add(t, 90 + i, 1);
}
for (let i = 0; i < calls; i++) {
  // The order rotates too, so that no target always follows another.
  for (let k = 0; k < targets.length; k++) {
    const t = targets[(i + k) % targets.length];
    t.ms.push(await add(t, i % 90, Math.floor(i / 90) % 90));
    if (pauseMs > 0) await pause();
  }
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)];
};
const r = (x) => Math.round(x * 1000) / 1000;
const stats = {};
for (const t of targets) {
  stats[t.name] = {
    p50: r(pct(t.ms, 50)), p90: r(pct(t.ms, 90)), p99: r(pct(t.ms, 99)),
    mean: r(t.ms.reduce((a, b) => a + b, 0) / t.ms.length),
  };
  console.log(JSON.stringify({ target: t.name, calls: t.ms.length, ...stats[t.name] }));
}
for (const t of targets.slice(1)) {
  console.log(JSON.stringify({
    added: t.name,
    p50: r(stats[t.name].p50 - stats.direct.p50),
    p99: r(stats[t.name].p99 - stats.direct.p99),
  }));
}
for (const t of targets) await t.client.close();
