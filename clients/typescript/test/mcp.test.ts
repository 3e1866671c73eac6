// Numbers with fractions at an MCP tool's number paths, live: the example
// MCP server's tools mirrored by a real `console serve` (definitions
// trusted at the first start), called through the console's MCP endpoint,
// /mcp/demo. The digest this client computes with the tool's number paths
// is the console's, and the bytes that reach the upstream are this
// client's canonical bytes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Client, DigestError, canonicalEnvelope, canonicalize, digestOf, envelope, type JsonObject } from '../src/index.js';
import { Console, mcpToolsFile } from './harness.js';

const ACTOR = 'agent:ts-mcp';
const PROTOCOL = '2025-11-25';

type Message = { id?: number; result?: Record<string, unknown>; error?: unknown };

/** The least of an MCP client over Streamable HTTP: a session, and
 * requests whose JSON text the caller writes. */
class MCPSession {
  private session = '';
  private nextId = 1;
  constructor(
    private readonly url: string,
    private readonly token: string,
  ) {}

  async initialize(): Promise<void> {
    const r = await this.request('initialize', JSON.stringify({ protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: 'countersign-ts-tests', version: '1' } }));
    assert.equal(r.protocolVersion, PROTOCOL);
    await this.post(JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  }

  async request(method: string, params: string): Promise<Record<string, unknown>> {
    const id = this.nextId++;
    const msg = await this.post(`{"jsonrpc":"2.0","id":${id},"method":${JSON.stringify(method)},"params":${params}}`, id);
    if (!msg || msg.error || !msg.result) throw new Error(`${method}: ${JSON.stringify(msg)}`);
    return msg.result;
  }

  callTool(name: string, args: string): Promise<Record<string, unknown>> {
    return this.request('tools/call', `{"name":${JSON.stringify(name)},"arguments":${args}}`);
  }

  private async post(body: string, want?: number): Promise<Message | undefined> {
    const headers: Record<string, string> = {
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      Authorization: `Bearer ${this.token}`,
    };
    if (this.session) Object.assign(headers, { 'Mcp-Session-Id': this.session, 'Mcp-Protocol-Version': PROTOCOL });
    const res = await fetch(this.url, { method: 'POST', headers, body });
    this.session = res.headers.get('Mcp-Session-Id') ?? this.session;
    const text = await res.text();
    if (res.status >= 400) throw new Error(`POST ${this.url}: ${res.status} ${text.slice(0, 500)}`);
    if (want === undefined) return undefined;
    const messages: Message[] = (res.headers.get('Content-Type') ?? '').startsWith('application/json')
      ? [JSON.parse(text) as Message]
      : text.split('\n').filter((l) => l.startsWith('data:')).map((l) => JSON.parse(l.slice(5)) as Message);
    const m = messages.find((x) => x.id === want);
    if (!m) throw new Error(`no answer to request ${want} in ${text.slice(0, 500)}`);
    return m;
  }
}

const structured = (r: Record<string, unknown>) => (r.structuredContent ?? {}) as Record<string, unknown>;
const text = (r: Record<string, unknown>) => ((r.content as Array<{ text?: string }>) ?? []).map((c) => c.text ?? '').join('');

let cs: Console;
let token: string;
let mcp: MCPSession;
before(async () => {
  cs = await Console.start(mcpToolsFile(), '--trust-first-definitions', '--hold', '1s');
  token = cs.token(ACTOR, 'demo');
  mcp = new MCPSession(cs.url + '/mcp/demo', token);
  await mcp.initialize();
  // The console lists the upstream's tools once it has connected.
  const deadline = Date.now() + 60_000;
  for (;;) {
    const tools = (await mcp.request('tools/list', '{}')).tools as Array<{ name: string; description?: string }>;
    if (tools.some((t) => t.name === 'echo' && (t.description ?? '').includes('exact bytes'))) break;
    if (Date.now() > deadline) throw new Error(`the mirrored tools were never listed: ${tools.map((t) => t.name)}`);
    await new Promise((r) => setTimeout(r, 200));
  }
});
after(async () => {
  await cs.stop();
});

async function pending(tool: string, args: string): Promise<{ digest: string; call_id: string }> {
  const r = await mcp.callTool(tool, args);
  const sc = structured(r);
  assert.equal(r.isError, true, text(r));
  assert.equal(sc.status, 'approval_pending', text(r));
  return sc as { digest: string; call_id: string };
}

test('the local digest of numbers at number paths is the console\'s', async () => {
  const args: JsonObject = {
    customer: { id: 'c-1' },
    lines: [
      { sku: 'ABC-1', qty: 2, price: 19.99 },
      { sku: 'XYZ-9', qty: 1, price: 5e-7 },
      { sku: 'TINY-1', qty: 3, price: 1e-7 },
      { sku: 'ZERO-0', qty: 1, price: 0.1 },
    ],
  };
  // The agent's own spelling, which the console canonicalizes.
  const sent = '{"lines":[{"sku":"ABC-1","qty":2,"price":1999e-2},{"sku":"XYZ-9","qty":1,"price":0.0000005},{"sku":"TINY-1","qty":3,"price":1.0e-7},' +
    '{"sku":"ZERO-0","qty":1,"price":0.10}],"customer":{"id":"c-1"}}';
  const sc = await pending('create_order', sent);
  const paths = ['/args/lines/*/price'];
  const env = envelope(ACTOR, 'demo', 'demo/create_order', 'mcp:demo', args);
  assert.equal(digestOf(env, { numberPaths: paths }), sc.digest);
  assert.match(canonicalEnvelope(env, { numberPaths: paths }), /"price":5e-7,"qty":1,/);
  // Without the tool's number paths the client refuses what the console
  // refuses of a declared tool.
  assert.throws(() => digestOf(env), (e: unknown) => e instanceof DigestError && e.hasProblem('float_not_allowed', '/args/lines/0/price'));

  // The call as the agent API returns it, to the same token, checks against the same digest.
  const c = new Client(cs.url, token);
  const call = await c.get(sc.call_id);
  assert.deepEqual([call.tool, call.target, call.digest], ['demo/create_order', 'mcp:demo', sc.digest]);
  assert.deepEqual(call.args, args);
  assert.equal(c.verifyDigest(call, { numberPaths: paths }), sc.digest);
});

test('the upstream receives exactly the canonical bytes', async () => {
  const args: JsonObject = { x: 5e-7, n: 9007199254740991, s: 'café', tags: ['b', 'a'] };
  const sent = JSON.stringify(args);
  const sc = await pending('echo', sent);
  assert.equal(digestOf(envelope(ACTOR, 'demo', 'demo/echo', 'mcp:demo', args), { numberPaths: ['/args/x'] }), sc.digest);
  cs.approve(sc.call_id, sc.digest);
  const r = await mcp.callTool('echo', sent);
  assert.notEqual(r.isError, true, text(r));
  const want = canonicalize(args, { numberPaths: ['/x'] });
  assert.equal(want, '{"n":9007199254740991,"s":"café","tags":["b","a"],"x":5e-7}');
  assert.equal(text(r), want);
});

test('a float at an integer path is refused alike', async () => {
  const r = await mcp.callTool('echo', '{"n":1.5,"x":1.5}');
  const sc = structured(r);
  assert.equal(sc.status, 'invalid_arguments', text(r));
  assert.deepEqual((sc.problems as Array<{ code: string; path: string }>).map((p) => [p.code, p.path]), [['float_not_allowed', '/args/n']]);
  assert.throws(
    () => digestOf(envelope(ACTOR, 'demo', 'demo/echo', 'mcp:demo', { n: 1.5, x: 1.5 }), { numberPaths: ['/args/x'] }),
    (e: unknown) => e instanceof DigestError && e.problems.length === 1 && e.hasProblem('float_not_allowed', '/args/n'),
  );
});
