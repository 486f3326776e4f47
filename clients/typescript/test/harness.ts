// Real servers for the tests: `lease serve` and examples/fenced-service,
// built from this repository with `go build` (or taken from
// LEASE_TEST_BINARY and LEASE_TEST_FENCED_SERVICE, which the Go test that
// runs these tests sets), each started on a free loopback port in a
// temporary directory and stopped when the test ends.

import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { IncomingMessage } from "node:http";
import { connect, createServer as createTCPServer, type AddressInfo, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));

/** repoRoot finds the module root above this file (dist/test or .build-*\/test). */
export function repoRoot(): string {
  for (let d = here; d !== dirname(d); d = dirname(d)) {
    if (existsSync(join(d, "go.mod"))) return d;
  }
  throw new Error("harness: no go.mod above " + here);
}

const built = new Map<string, string>();

/** binary returns the path of a Go program of this repository, built once per process. */
function binary(env: string, pkg: string, name: string): string {
  const given = process.env[env];
  if (given) return given;
  const have = built.get(pkg);
  if (have) return have;
  const dir = mkdtempSync(join(tmpdir(), "lease-ts-bin-"));
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  const out = join(dir, name);
  execFileSync("go", ["build", "-o", out, pkg], { cwd: repoRoot(), stdio: ["ignore", "inherit", "inherit"] });
  built.set(pkg, out);
  return out;
}

/** A running server process. */
export interface Running {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  readonly port: number;
  readonly proc: ChildProcess;
  /** The server's log so far. */
  log(): string;
  /** stop ends the process (SIGCONT first, in case it is paused) and waits for it. */
  stop(): Promise<void>;
}

/** T is the part of node:test's context the harness needs. */
interface T {
  after(fn: () => unknown): void;
}

async function start(t: T, bin: string, args: string[], listening: RegExp, what: string): Promise<Running> {
  const proc = spawn(bin, args, { stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const exited = new Promise<void>((res) => proc.once("exit", () => res()));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGCONT");
      proc.kill("SIGTERM");
      const killer = setTimeout(() => proc.kill("SIGKILL"), 15_000);
      await exited;
      clearTimeout(killer);
    }
  };
  // Registered before anything can fail, so that no process outlives the test.
  t.after(stop);
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`harness: ${what} did not say where it listens within 30 s:\n${log}`)), 30_000);
    const onData = (b: Buffer) => {
      log += b.toString();
      const m = listening.exec(log);
      if (m?.[1]) {
        clearTimeout(timer);
        res(m[1].startsWith("http") ? m[1] : `http://${m[1]}`);
      }
    };
    proc.stderr?.on("data", onData);
    proc.stdout?.on("data", onData);
    proc.once("exit", (code, sig) => {
      clearTimeout(timer);
      rej(new Error(`harness: ${what} exited (${code ?? sig}) before listening:\n${log}`));
    });
  });
  const running: Running = {
    url,
    port: Number(new URL(url).port),
    proc,
    log: () => log,
    stop,
  };
  return running;
}

/** Options of startLease. */
export interface LeaseServeOptions {
  /** Bearer tokens: lines of the --auth-tokens-file ("TOKEN PREFIX…"). */
  readonly tokens?: string[];
  /** Listen on this port instead of a free one (a restart on the same address). */
  readonly port?: number;
  /** The data directory; default a fresh one. */
  readonly dataDir?: string;
  /** Serve this --backend (a postgres:// URL, say) instead of the embedded store. */
  readonly backend?: string;
  /** More flags, such as --max-watchers 1. */
  readonly args?: string[];
}

/** runLease runs the `lease` binary the servers run with args (a backup, a restore), throwing unless it exits 0. */
export function runLease(args: string[]): void {
  execFileSync(binary("LEASE_TEST_BINARY", "./cmd/lease", "lease"), args, { stdio: ["ignore", "ignore", "inherit"] });
}

/** startLease starts `lease serve` on the embedded store until the test ends. */
export async function startLease(t: T, opts: LeaseServeOptions = {}): Promise<Running & { dataDir: string }> {
  const dir = mkdtempSync(join(tmpdir(), "lease-ts-serve-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const dataDir = opts.dataDir ?? join(dir, "data");
  const store = opts.backend === undefined ? ["--data-dir", dataDir] : ["--backend", opts.backend];
  const args = ["serve", "--addr", `127.0.0.1:${opts.port ?? 0}`, ...store, "--shutdown-timeout", "2s", ...(opts.args ?? [])];
  if (opts.tokens) {
    const file = join(dir, "tokens");
    writeFileSync(file, opts.tokens.join("\n") + "\n", { mode: 0o600 });
    args.push("--auth-tokens-file", file);
  }
  const r = await start(t, binary("LEASE_TEST_BINARY", "./cmd/lease", "lease"), args, /msg=listening addr=(\S+)/, "lease serve");
  return { ...r, dataDir };
}

/** startFencedService starts examples/fenced-service (fence.Middleware over fence.Memory) until the test ends. */
export async function startFencedService(t: T, strict = false): Promise<Running> {
  const args = ["--addr", "127.0.0.1:0", ...(strict ? ["--strict"] : [])];
  return start(
    t,
    binary("LEASE_TEST_FENCED_SERVICE", "./examples/fenced-service", "fenced-service"),
    args,
    /fenced-service listening"? url=(\S+)/,
    "fenced-service",
  );
}

/** postgresURL is the database the Go test started (internal/testkit/pgtest), or fails with how to get one. */
export function postgresURL(): string {
  const u = process.env["LEASE_TEST_POSTGRES_URL"];
  if (!u) {
    throw new Error(
      "harness: LEASE_TEST_POSTGRES_URL is not set: run these tests with `go test ./clients/typescript` " +
        "(which starts a throwaway PostgreSQL), or point it at a database",
    );
  }
  return u;
}

/** metric reads a metric without labels from a server's /metrics, NaN if it is not there. */
export async function metric(server: { url: string }, name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const m = new RegExp(`^${name} (\\S+)$`, "m").exec(text);
  return m?.[1] === undefined ? NaN : Number(m[1]);
}

/** unique returns a name no other test run uses. */
export function unique(prefix: string): string {
  return `${prefix}-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
}

/** waitFor polls cond every 5 ms until it holds, failing after ms. */
export async function waitFor(what: string, cond: () => boolean | Promise<boolean>, ms = 10_000): Promise<void> {
  const until = performance.now() + ms;
  while (!(await cond())) {
    if (performance.now() > until) throw new Error(`harness: ${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** closedPort returns the URL of a loopback port nothing listens on. */
export async function closedPort(): Promise<string> {
  const srv = createTCPServer();
  await new Promise<void>((res) => srv.listen(0, "127.0.0.1", res));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((res) => srv.close(() => res()));
  return `http://127.0.0.1:${port}`;
}

/** body reads the body of a request a test server received. */
export function body(req: IncomingMessage): Promise<string> {
  return new Promise((res, rej) => {
    let s = "";
    req.setEncoding("utf8");
    req.on("data", (c: string) => (s += c));
    req.on("end", () => res(s));
    req.on("error", rej);
  });
}

/**
 * pause stops proc with SIGSTOP and waits until the kernel shows it stopped
 * (/proc/PID/stat), so that nothing sent after pause returns is answered:
 * the signal alone takes effect when each of the process's threads next
 * enters the kernel, which on a busy machine can be after a request sent
 * at once has been answered. Without /proc it returns after the signal.
 */
export async function pause(proc: ChildProcess): Promise<void> {
  proc.kill("SIGSTOP");
  const stat = `/proc/${proc.pid}/task`;
  if (!existsSync(stat)) return;
  const deadline = performance.now() + 5_000;
  const stopped = (): boolean => {
    try {
      return readdirSync(stat).every((t) => {
        const line = readFileSync(`${stat}/${t}/stat`, "utf8");
        const state = line.slice(line.lastIndexOf(")") + 2, line.lastIndexOf(")") + 3);
        return state === "T" || state === "t";
      });
    } catch {
      return false;
    }
  };
  while (!stopped()) {
    if (performance.now() > deadline) throw new Error(`harness: process ${proc.pid} not stopped 5 s after SIGSTOP`);
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** A loopback TCP proxy to a server whose open connections can be stranded (strandingProxy). */
export interface StrandingProxy {
  /** http://127.0.0.1:PORT */
  readonly url: string;
  /**
   * strand cuts the connections open now off for good without closing
   * them, while new ones pass: what either side sends is taken (as a peer's
   * kernel takes it) and never delivered, a hang-up included, as on a path
   * that died under an established connection (a NAT or proxy that lost
   * it, a client that moved networks). Neither side learns of it until
   * cutStranded.
   */
  strand(): void;
  /** cutStranded closes the stranded connections, as the kernel at last does to a peer that acknowledges nothing. */
  cutStranded(): void;
}

/** strandingProxy forwards loopback connections to port until the test ends. */
export async function strandingProxy(t: T, port: number): Promise<StrandingProxy> {
  const pairs: { a: Socket; b: Socket; stranded: boolean }[] = [];
  const srv = createTCPServer({ allowHalfOpen: true }, (a) => {
    const b = connect({ port, host: "127.0.0.1", allowHalfOpen: true });
    const pair = { a, b, stranded: false };
    pairs.push(pair);
    for (const [from, to] of [[a, b], [b, a]] as const) {
      from.on("data", (chunk: Buffer) => {
        if (!pair.stranded) to.write(chunk);
      });
      from.on("end", () => {
        if (!pair.stranded) to.end();
      });
      from.on("error", () => {
        if (!pair.stranded) to.destroy();
      });
    }
  });
  await new Promise<void>((res) => srv.listen(0, "127.0.0.1", res));
  t.after(() => {
    srv.close();
    for (const p of pairs) {
      p.a.destroy();
      p.b.destroy();
    }
  });
  return {
    url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`,
    strand: () => {
      for (const p of pairs) p.stranded = true;
    },
    cutStranded: () => {
      for (const p of pairs) {
        if (!p.stranded) continue;
        p.a.destroy();
        p.b.destroy();
      }
    },
  };
}
