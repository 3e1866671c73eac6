// A real `console serve` on 127.0.0.1 for the tests, driven through the
// console's own command line (tokens, operators, decisions). The binary is
// $COUNTERSIGN_CONSOLE, or one built here with `go build` from this
// repository; without either the suites fail (clients_test.go skips them
// first where a runtime is missing, except under CI=true).

import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, existsSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, type Submitted } from '../src/index.js';

// build/test/harness.js → clients/typescript
const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const CLIENTS = resolve(PACKAGE, '..');
export const REPO = resolve(CLIENTS, '..');
export const TESTDATA = join(CLIENTS, 'testdata');
export const TOOLS = join(TESTDATA, 'tools.yaml');
export const OPERATOR = 'olivia';
export const OPERATOR_PASSWORD = 'pw-olivia-correct horse battery staple';

let binary: string | undefined;

export function consoleBinary(): string {
  if (binary) return binary;
  if (process.env.COUNTERSIGN_CONSOLE) return (binary = process.env.COUNTERSIGN_CONSOLE);
  if (!existsSync(join(REPO, 'go.mod'))) throw new Error('no console binary: set COUNTERSIGN_CONSOLE');
  const out = mkdtempSync(join(tmpdir(), 'countersign-ts-'));
  process.on('exit', () => rmSync(out, { recursive: true, force: true }));
  binary = join(out, 'console');
  execFileSync('go', ['build', '-o', binary, './cmd/console'], { cwd: REPO, stdio: 'inherit' });
  return binary;
}

let mcpDemo: string | undefined;

/** The example MCP server (examples/mcpdemo/cmd/mcp-demo):
 * $COUNTERSIGN_MCP_DEMO, or one built here with `go build`. */
export function mcpDemoBinary(): string {
  if (mcpDemo) return mcpDemo;
  if (process.env.COUNTERSIGN_MCP_DEMO) return (mcpDemo = process.env.COUNTERSIGN_MCP_DEMO);
  if (!existsSync(join(REPO, 'go.mod'))) throw new Error('no example MCP server: set COUNTERSIGN_MCP_DEMO');
  const out = mkdtempSync(join(tmpdir(), 'countersign-ts-mcp-'));
  process.on('exit', () => rmSync(out, { recursive: true, force: true }));
  mcpDemo = join(out, 'mcp-demo');
  execFileSync('go', ['build', '-o', mcpDemo, './examples/mcpdemo/cmd/mcp-demo'], { cwd: REPO, stdio: 'inherit' });
  return mcpDemo;
}

/** A tools file whose only section is the example MCP server, demo, spawned
 * over stdio: its tools are mirrored as demo/{tool}. */
export function mcpToolsFile(): string {
  const dir = mkdtempSync(join(tmpdir(), 'countersign-ts-mcp-tools-'));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'tools.yaml');
  writeFileSync(path, `mcp:\n  demo:\n    command: [${JSON.stringify(mcpDemoBinary())}]\n`);
  return path;
}

export function runConsole(args: string[], stdin = ''): string {
  return execFileSync(consoleBinary(), args, { input: stdin, encoding: 'utf8', timeout: 120_000, stdio: ['pipe', 'pipe', 'pipe'] });
}

/** The console's own digest of a proposal body: exit code and stdout. */
export function consoleDigest(body: string, actor: string, audience: string): { code: number; out: string } {
  try {
    const out = execFileSync(consoleBinary(), ['digest', '--actor', actor, '--audience', audience], { input: body, encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'] });
    return { code: 0, out };
  } catch (e) {
    const err = e as { status?: number; stdout?: string };
    return { code: err.status ?? -1, out: String(err.stdout ?? '') };
  }
}

/** A running `console serve` over a fresh data directory. */
export class Console {
  readonly data = mkdtempSync(join(tmpdir(), 'countersign-ts-data-'));
  url = '';
  private proc: ChildProcess | undefined;
  private logs = '';

  private cookies = new Map<string, string>();

  static async start(tools = TOOLS, ...flags: string[]): Promise<Console> {
    const c = new Console();
    await c.boot(tools, flags);
    return c;
  }

  private async boot(tools: string, flags: string[]): Promise<void> {
    const proc = spawn(consoleBinary(), ['serve', '--addr', '127.0.0.1:0', '--data', this.data, '--tools', tools, '--log-level', 'warn', ...flags], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.proc = proc;
    proc.stderr!.on('data', (d: Buffer) => (this.logs += d.toString()));
    this.url = await new Promise<string>((resolveUrl, reject) => {
      const timer = setTimeout(() => reject(new Error(`console did not report its address:\n${this.logs}`)), 60_000);
      proc.stdout!.on('data', (d: Buffer) => {
        this.logs += d.toString();
        const m = /http:\/\/\S+/.exec(this.logs);
        if (m) {
          clearTimeout(timer);
          resolveUrl(m[0].replace(/\/$/, ''));
        }
      });
      proc.on('exit', (code) => reject(new Error(`console exited ${code}:\n${this.logs}`)));
    });
    runConsole(['user', 'add', OPERATOR, '--role', 'operator', '--data', this.data, '--password-stdin'], OPERATOR_PASSWORD + '\n');
  }

  token(actor: string, audience = 'payments-host', owners: string[] = []): string {
    return runConsole(['token', 'create', '--data', this.data, '--actor', actor, '--audience', audience,
      ...owners.flatMap((o) => ['--owner', o])]).trim();
  }

  /** Revokes every token of actor (`console token revoke`): the console
   * answers their requests 401 from then on. */
  revokeTokens(actor: string): void {
    const ids = runConsole(['token', 'list', '--data', this.data])
      .split('\n')
      .map((line) => line.split(/\s+/))
      .filter((cols) => cols[1] === actor)
      .map((cols) => cols[0]!);
    if (ids.length === 0) throw new Error(`no token of ${actor} to revoke`);
    for (const id of ids) runConsole(['token', 'revoke', id, '--data', this.data]);
  }

  /** Freezes actor's calls (`console freeze --actor`): nothing of theirs
   * is approved or redeemed from then on (503 frozen). */
  freezeActor(actor: string, reason: string): void {
    runConsole(['freeze', '--actor', actor, '--reason', reason, '--as', OPERATOR, '--data', this.data]);
  }

  approve(id: string, digest: string): unknown {
    return JSON.parse(runConsole(['approve', id, '--as', OPERATOR, '--digest', digest, '--data', this.data]));
  }

  /** Answers a pending call with an edited one (`console counter`):
   * sets maps a JSON Pointer into args to its new value as JSON. Returns
   * the counter-proposal. */
  counter(id: string, digest: string, sets: Record<string, string>): { id: string; digest: string } {
    const flags = Object.entries(sets).flatMap(([k, v]) => ['--set', `${k}=${v}`]);
    return JSON.parse(runConsole(['counter', id, '--as', OPERATOR, '--digest', digest, ...flags, '--data', this.data]));
  }

  deny(id: string, reason: string): unknown {
    return JSON.parse(runConsole(['deny', id, '--as', OPERATOR, '--reason', reason, '--data', this.data]));
  }

  /** Records an operator's resolution of a call whose outcome is unknown
   * or whose lease expired, through the console's web form (the only way a
   * person resolves one), logged in as the operator. */
  async resolve(id: string, verdict: string, note: string, evidence = ''): Promise<void> {
    await this.login();
    const path = '/calls/' + encodeURIComponent(id);
    const page = await this.browse(path);
    const after = await this.browse(path + '/resolve', { csrf: formToken(page), verdict, note, evidence, from: 'call' });
    if (!after.includes('data-testid="resolution"')) throw new Error(`the resolution was not recorded: ${after.slice(0, 2000)}`);
  }

  /** Revokes the grant of an approved call that has not been redeemed,
   * through the console's web form (the only way a person revokes one),
   * logged in as the operator. */
  async revokeGrant(id: string, reason: string): Promise<void> {
    await this.login();
    const path = '/calls/' + encodeURIComponent(id);
    const page = await this.browse(path);
    if (!page.includes('data-testid="revoke-form"')) throw new Error(`the call page offers no revocation: ${page.slice(0, 2000)}`);
    const after = await this.browse(path + '/revoke', { csrf: formToken(page), reason });
    if (!after.includes('data-testid="revoked-by"')) throw new Error(`the revocation was not recorded: ${after.slice(0, 2000)}`);
  }

  /** Approves a whole plan once through its page in the console (the only
   * way a person approves one), logged in as the operator. */
  async approvePlan(id: string): Promise<void> {
    await this.login();
    const path = '/plans/' + encodeURIComponent(id);
    const page = await this.browse(path);
    if (!page.includes('data-testid="plan-approve-form"')) throw new Error(`the plan page offers no approval: ${page.slice(0, 2000)}`);
    const field = (name: string): string => {
      const m = new RegExp(`name="${name}" value="([^"]*)"`).exec(page);
      if (!m) throw new Error(`the plan page has no ${name}`);
      return m[1]!.replaceAll('&amp;', '&');
    };
    const after = await this.browse(path + '/approve', { csrf: field('csrf'), digest: field('digest'), presented: field('presented') });
    if (!after.includes('data-testid="plan-message"')) throw new Error(`the plan was not approved: ${after.slice(0, 2000)}`);
  }

  /** The id of the first plan card on the operator's queue, if any. */
  async pendingPlan(): Promise<string | undefined> {
    await this.login();
    const page = await this.browse('/');
    return /data-testid="plan-card" data-plan="([^"]+)"/.exec(page)?.[1];
  }

  /** Logs the operator's browser in, the first time. */
  private async login(): Promise<void> {
    if (this.cookies.size === 0) {
      const login = await this.browse('/login');
      await this.browse('/login', { csrf: formToken(login), name: OPERATOR, password: OPERATOR_PASSWORD });
    }
  }

  /** A page as the operator's browser gets it, following redirects and
   * keeping cookies. */
  private async browse(path: string, form?: Record<string, string>): Promise<string> {
    let url = this.url + path;
    let init: RequestInit = form
      ? { method: 'POST', body: new URLSearchParams(form).toString(), headers: { 'Content-Type': 'application/x-www-form-urlencoded' } }
      : { method: 'GET' };
    for (let hops = 0; hops < 5; hops++) {
      const headers = new Headers(init.headers);
      headers.set('Origin', this.url);
      headers.set('Accept', 'text/html');
      if (this.cookies.size) headers.set('Cookie', [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; '));
      const res = await fetch(url, { ...init, headers, redirect: 'manual' });
      for (const c of res.headers.getSetCookie()) {
        const [pair] = c.split(';');
        const i = pair!.indexOf('=');
        this.cookies.set(pair!.slice(0, i).trim(), pair!.slice(i + 1).trim());
      }
      const location = res.headers.get('Location');
      if (res.status >= 300 && res.status < 400 && location) {
        await res.text();
        url = new URL(location, url).toString();
        init = { method: 'GET' };
        continue;
      }
      return await res.text();
    }
    throw new Error(`too many redirects from ${path}`);
  }

  /** A series of /metrics without labels. */
  async metric(name: string): Promise<number> {
    const text = await (await fetch(this.url + '/metrics')).text();
    const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
    if (!m) throw new Error(`/metrics has no ${name}`);
    return Number(m[1]);
  }

  async openWaiters(): Promise<number> {
    const text = await (await fetch(this.url + '/metrics')).text();
    const m = /^countersign_open_waiters (\S+)$/m.exec(text);
    if (!m) throw new Error('/metrics has no countersign_open_waiters');
    return Number(m[1]);
  }

  /** Resolves once n long-polls are held open by the console. */
  async waitForWaiters(n: number, limitMs = 20_000): Promise<void> {
    const deadline = Date.now() + limitMs;
    while ((await this.openWaiters()) < n) {
      if (Date.now() > deadline) throw new Error(`open waiters < ${n} after ${limitMs} ms`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async stop(): Promise<void> {
    const proc = this.proc;
    if (proc && proc.exitCode === null) {
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGTERM');
      await exited;
    }
    rmSync(this.data, { recursive: true, force: true });
  }
}

function formToken(page: string): string {
  const m = /name="csrf" value="([^"]+)"/.exec(page);
  if (!m) throw new Error('the page has no form token');
  return m[1]!;
}

/** The (header, body) sections of a corpus file in clients/testdata. */
export function readSections(name: string): Array<[string, string]> {
  const text = readFileSync(join(TESTDATA, name), 'utf8');
  const parts = text.split(/^-- (.*) --\n/m);
  const out: Array<[string, string]> = [];
  for (let i = 1; i < parts.length; i += 2) out.push([parts[i]!, parts[i + 1]!]);
  return out;
}

/** Resolves with p's value, or rejects when it takes longer than limitMs. */
export function within<T>(p: Promise<T>, limitMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not settle within ${limitMs} ms`)), limitMs);
  });
  return Promise.race([p, limit]).finally(() => clearTimeout(timer));
}

/** A client that queues every call it submits, so that a test can decide a
 * call that an adapter proposed. */
export class RecordingClient extends Client {
  private submitted: Submitted[] = [];
  private waiting: Array<(c: Submitted) => void> = [];

  override async submit(...a: Parameters<Client['submit']>): Promise<Submitted> {
    const call = await super.submit(...a);
    const w = this.waiting.shift();
    if (w) w(call);
    else this.submitted.push(call);
    return call;
  }

  nextSubmitted(): Promise<Submitted> {
    const c = this.submitted.shift();
    if (c) return Promise.resolve(c);
    return within(new Promise<Submitted>((r) => this.waiting.push(r)), 30_000, 'a submission');
  }

  pendingSubmissions(): number {
    return this.submitted.length;
  }
}
