// Runs fuzz cases against the command line as child processes and checks how each ends: the exit code,
// exactly one stderr line that starts with "poot:", matches the case and holds no raw control character,
// nothing on stdout, nothing written (the case's directory is unchanged and TMPDIR / XDG_RUNTIME_DIR point
// inside it), and bounds on wall time and peak RSS.
//
// Peak RSS: the runner polls /proc/PID/status for VmHWM (the kernel's high-water mark of the child's
// resident set) every POLL_MS and kills the child once it passes the bound, so a runaway allocation ends the
// case instead of the machine. The last POLL_MS before exit are not observed; a child that exits that fast
// cannot grow far in them. Without /proc (not Linux) only time is bounded and RSS is reported as unknown.
import { spawn, spawnSync } from "node:child_process";
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { caseRng, type FuzzCase } from "./case.ts";

export type Runtime = "deno" | "bun";

/** Per-case bounds (stated in the test's name and the report). */
export const BOUNDS = { wallMs: 30_000, rssMiB: 512 };
const POLL_MS = 10;

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const env = (globalThis as unknown as { process: { env: Record<string, string | undefined> } }).process.env;

/** The CLI entry under test: POOT_FUZZ_CLI (a file, or a repo root holding cli/main.ts), else this repo's. */
export function cliPath(): string {
  const p = env.POOT_FUZZ_CLI;
  if (!p) return join(REPO, "cli", "main.ts");
  return p.endsWith(".ts") ? p : join(p, "cli", "main.ts");
}

/** The runtime's binary: the one running this test when it is that runtime, else node_modules/.bin, else PATH. */
export function runtimeBinary(rt: Runtime): string | undefined {
  const g = globalThis as unknown as { Deno?: { execPath(): string }; Bun?: unknown; process?: { execPath: string } };
  if (rt === "deno" && g.Deno) return g.Deno.execPath();
  if (rt === "bun" && g.Bun) return g.process!.execPath;
  for (const bin of [join(REPO, "node_modules", ".bin", rt), rt]) {
    try {
      if (spawnSync(bin, ["--version"], { stdio: "ignore", timeout: 20_000 }).status === 0) return bin;
    } catch { /* try the next */ }
  }
  return undefined;
}

/** The runtimes to run: POOT_FUZZ_RUNTIMES ("deno,bun" by default). */
export function runtimes(): Runtime[] {
  return (env.POOT_FUZZ_RUNTIMES ?? "deno,bun").split(",").map((s) => s.trim()).filter((s): s is Runtime => s === "deno" || s === "bun");
}

export interface CaseResult {
  name: string;
  runtime: Runtime;
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  wallMs: number;
  /** Peak resident set in MiB, when /proc shows it. */
  rssMiB?: number;
  /** Why the case fails; empty when it passes. */
  problems: string[];
}

interface Snap {
  [path: string]: string;
}

/** Every path under `dir` with its kind, size and mtime: a write anywhere changes it. */
function snapshot(dir: string): Snap {
  const out: Snap = {};
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      const st = lstatSync(p);
      out[p] = `${st.isDirectory() ? "d" : st.isFile() ? "f" : "o"}:${st.isDirectory() ? 0 : st.size}:${st.mtimeMs}:${st.mode}`;
      if (st.isDirectory()) walk(p);
    }
  };
  walk(dir);
  return out;
}

function diff(a: Snap, b: Snap): string[] {
  const out: string[] = [];
  for (const p of Object.keys(b)) if (a[p] === undefined) out.push(`created ${p}`);
  for (const p of Object.keys(a)) {
    if (b[p] === undefined) out.push(`removed ${p}`);
    else if (a[p] !== b[p]) out.push(`changed ${p}`);
  }
  return out;
}

function peakRssMiB(pid: number): number | undefined {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Runs one case under one runtime in a fresh directory (removed afterwards) and checks how it ended. */
export async function runCase(c: FuzzCase, rt: Runtime, bin: string, seed: number): Promise<CaseResult> {
  const dir = mkdtempSync(join(tmpdir(), "poot-fuzz-"));
  try {
    mkdirSync(join(dir, "tmp"));
    mkdirSync(join(dir, "xdg"), { mode: 0o700 });
    const args = await c.setup(dir, caseRng(seed, c.name));
    const before = snapshot(dir);
    const argv = rt === "deno" ? ["run", "-A", cliPath(), ...args] : [cliPath(), ...args];
    const childEnv: Record<string, string | undefined> = { ...env, TMPDIR: join(dir, "tmp"), XDG_RUNTIME_DIR: join(dir, "xdg"), NO_COLOR: "1", DENO_NO_UPDATE_CHECK: "1" };
    if (c.noRuntimeDir) delete childEnv.XDG_RUNTIME_DIR;
    const r = await spawnBounded(bin, argv, { cwd: dir, env: childEnv, stdin: c.stdin });
    const problems: string[] = [...r.killed];
    if (r.code !== c.exit) problems.push(`exit ${r.code ?? r.signal}, expected ${c.exit}`);
    if (r.stdout !== "") problems.push(`stdout not empty: ${JSON.stringify(r.stdout.slice(0, 200))}`);
    const lines = r.stderr.replace(/\n$/, "").split("\n");
    if (r.stderr === "" || lines.length !== 1) problems.push(`${r.stderr === "" ? 0 : lines.length} stderr lines, expected 1`);
    const line = lines[0] ?? "";
    if (!line.startsWith("poot: ")) problems.push(`stderr does not start with "poot: "`);
    if (!c.message.test(line)) problems.push(`stderr does not match ${c.message}`);
    // deno-lint-ignore no-control-regex
    if (/[\x00-\x08\x0b-\x1f\x7f\x9b]/.test(r.stderr.replace(/\n$/, ""))) problems.push("stderr holds a raw control character");
    problems.push(...diff(before, snapshot(dir)).map((d) => `wrote: ${d}`));
    if (r.wallMs > BOUNDS.wallMs) problems.push(`took ${Math.round(r.wallMs)} ms, bound ${BOUNDS.wallMs}`);
    if (r.rssMiB !== undefined && r.rssMiB > BOUNDS.rssMiB) problems.push(`peak RSS ${r.rssMiB.toFixed(0)} MiB, bound ${BOUNDS.rssMiB}`);
    return { name: c.name, runtime: rt, ...r, problems };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Spawned {
  code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  wallMs: number;
  rssMiB?: number;
  killed: string[];
}

function spawnBounded(bin: string, argv: string[], o: { cwd: string; env: Record<string, string | undefined>; stdin?: string }): Promise<Spawned> {
  return new Promise((resolve) => {
    const t0 = performance.now();
    const child = spawn(bin, argv, { cwd: o.cwd, env: o.env as Record<string, string>, stdio: ["pipe", "pipe", "pipe"] });
    const out: Uint8Array[] = [], err: Uint8Array[] = [];
    child.stdout!.on("data", (b: Uint8Array) => out.push(b));
    child.stderr!.on("data", (b: Uint8Array) => err.push(b));
    child.stdin!.on("error", () => {}); // a child that exits without reading stdin
    child.stdin!.end(o.stdin ?? "");
    const killed: string[] = [];
    let rss: number | undefined;
    const timer = setInterval(() => {
      if (child.pid !== undefined) {
        const r = peakRssMiB(child.pid);
        if (r !== undefined) rss = Math.max(rss ?? 0, r);
      }
      if (rss !== undefined && rss > BOUNDS.rssMiB && !killed.length) {
        killed.push(`killed: peak RSS passed ${BOUNDS.rssMiB} MiB`);
        child.kill("SIGKILL");
      }
      if (performance.now() - t0 > BOUNDS.wallMs && !killed.length) {
        killed.push(`killed: ran past ${BOUNDS.wallMs} ms`);
        child.kill("SIGKILL");
      }
    }, POLL_MS);
    const text = (bs: Uint8Array[]) => new TextDecoder().decode(concat(bs));
    child.on("error", (e) => {
      clearInterval(timer);
      resolve({ code: null, signal: null, stdout: "", stderr: "", wallMs: 0, killed: [`spawn failed: ${e.message}`] });
    });
    child.on("close", (code, signal) => {
      clearInterval(timer);
      resolve({ code, signal, stdout: text(out), stderr: text(err), wallMs: performance.now() - t0, rssMiB: rss, killed });
    });
  });
}

function concat(bs: Uint8Array[]): Uint8Array {
  const n = bs.reduce((a, b) => a + b.length, 0);
  const o = new Uint8Array(n);
  let p = 0;
  for (const b of bs) o.set(b, p), p += b.length;
  return o;
}

/** Runs `cases` under `rt`, `parallel` at a time; results in case order. */
export async function runAll(cases: readonly FuzzCase[], rt: Runtime, bin: string, seed: number, parallel = 2): Promise<CaseResult[]> {
  const results: CaseResult[] = new Array(cases.length);
  let next = 0;
  const worker = async () => {
    while (next < cases.length) {
      const i = next++;
      try {
        results[i] = await runCase(cases[i], rt, bin, seed);
      } catch (e) {
        results[i] = {
          name: cases[i].name, runtime: rt, code: null, signal: null, stdout: "", stderr: "", wallMs: 0,
          problems: [`setup or runner failed: ${(e as Error).message}`],
        };
      }
    }
  };
  await Promise.all(Array.from({ length: parallel }, worker));
  return results;
}

/** POOT_FUZZ_ONLY (a regular expression on case names) narrows a run to the cases it matches, to reproduce one. */
export function selected<T extends { name: string }>(cases: readonly T[]): T[] {
  const only = env.POOT_FUZZ_ONLY;
  return only ? cases.filter((c) => new RegExp(only).test(c.name)) : [...cases];
}

/**
 * The cases of a file a runtime runs: all of them, except where one run of .ci/test runs both runtimes
 * (POOT_RUNTIME_SPLIT=1): there gguf_cases.ts is dealt between them, Bun every other case of each class and Deno
 * the rest, so each of the 98 runs once. The GGUF reader those cases reach is the same code under either runtime;
 * what each runtime's run adds is its own file reads, error path and exit, which every class still reaches under
 * both (each has two cases or more). The other files (flags through node:util's parseArgs, which each runtime
 * implements itself; the quantizer's writes) run whole under both.
 */
export function forRuntime<T extends { cls: string }>(file: string, cases: readonly T[], rt: Runtime): T[] {
  if (env.POOT_RUNTIME_SPLIT !== "1" || file !== "gguf_cases.ts") return [...cases];
  const seen = new Map<string, number>();
  return cases.filter((c) => {
    const n = seen.get(c.cls) ?? 0;
    seen.set(c.cls, n + 1);
    return n % 2 === (rt === "bun" ? 0 : 1);
  });
}

/** The case files: every tests/fuzz/*_cases.ts. */
export function caseFiles(): string[] {
  const dir = fileURLToPath(new URL(".", import.meta.url));
  return readdirSync(dir).filter((f) => f.endsWith("_cases.ts")).sort().map((f) => join(dir, f));
}

/** One line per failing case, with what reproduces it. */
export function report(results: readonly CaseResult[], seed: number): string {
  const bad = results.filter((r) => r.problems.length);
  const lines = bad.map((r) =>
    `  ${r.runtime} ${r.name}: ${r.problems.join("; ")}\n    stderr: ${JSON.stringify(r.stderr.slice(0, 400))}`
  );
  return `${bad.length} of ${results.length} fuzz cases failed (POOT_FUZZ_SEED=${seed} reproduces):\n${lines.join("\n")}`;
}

/**
 * Entries (and mtimes) of the repository folders a stray relative write or a cache would land in: the suite
 * compares them before and after, beside each case's own directory check.
 */
export function repoSnapshot(): Snap {
  const out: Snap = {};
  for (const d of ["", "cli", "models", join("models", "stories260K"), "tests", join("tests", "fuzz")]) {
    const dir = join(REPO, d);
    if (!existsSync(dir)) continue;
    for (const name of readdirSync(dir)) {
      const st = lstatSync(join(dir, name));
      out[join(dir, name)] = `${st.isDirectory() ? "d" : st.size}:${st.isDirectory() ? 0 : st.mtimeMs}`;
    }
  }
  return out;
}

/** What changed between two repoSnapshots. */
export function repoChanges(a: Snap, b: Snap): string[] {
  return diff(a, b);
}

/** Does `path` exist (for a skip reason)? */
export function exists(path: string): boolean {
  return existsSync(path);
}
