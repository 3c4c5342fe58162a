// The whole speed table in one command: every row of issue 18 beside its roofline or reference, each row a
// bounded subprocess (a hang or crash costs that row, reported in it, never the table):
//   decode   bench/decode.ts at the three real shapes (ptx, bf16, cap 2048), tok/s against the memory roofline
//   deep     the 1B shape at cap 8192: ms per token at pos 4100 over pos 0 (attention's cost of context)
//   prefill  bench/driver.ts: time to first token of 512- and 2048-token prompts through the Driver's own chunks
//   vulkan-prefill  the same on Vulkan (cooperative matrices where the driver has them)
//   host     host µs per token: bench/decode.ts and the Driver (bench/driver.ts) at stories260K
//   vulkan, wgpu  bench/decode.ts at the 1B and qwen2.5-0.5b shapes on those backends (issue 23)
//   quant, vulkan-quant, wgpu-quant  bench/decode.ts over Q4_K_M and Q8_0 weights (8B and 1B; wgpu the 1B)
//   bun      bench/decode.ts at the 1B shape under Bun (skipped, saying why, when `bun` is not on PATH)
//   pytorch, pytorch-prefill  the PyTorch anchors (gpt-fast's model compiled with reduce-overhead and CUDA graphs;
//            eager prefill) in the same run, from --anchors DIR (default .dev/anchor), which holds the anchor scripts
//            gptfast_decode.py and torch_prefill.py and gpt-fast's model.py as gf_model.py (none of them in this
//            repository; README "The whole table in one command"); skipped, saying why, where DIR or python3 is missing
//
//   deno run -A bench/suite.ts [--rows decode,deep,...] [--shapes A,B (decode rows; default the three)]
//     [--backend ptx] [--out FILE.json] [--baseline OLD.json] [--anchors DIR]
//   deno run -A bench/suite.ts --from A.json,B.json [--baseline OLD.json]   (one table from runs' --out files)
//
// --baseline puts an earlier run's numbers (its --out file) beside the new ones. Where the pytorch groups ran, the
// decode and prefill rows are read against their figures from this run; elsewhere against the H200 measurements
// quoted in issue 18, marked "(issue)".
import { argv, env, execPath, exit, stderr } from "node:process";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { parseFlags } from "./flags.ts";
import { H200_BANDWIDTH } from "./decode.ts";
import { isH200 } from "./table.ts";

// deno-lint-ignore no-explicit-any -- the commands' JSON output, read field by field
type Json = any;

/** One printed line of the table. `value` is what --baseline compares; `text` how it prints. */
export interface SuiteRow {
  group: string;
  name: string;
  value?: number;
  unit: string;
  /** The roofline or the reference it is read against, as text. */
  against?: string;
  /** value as a fraction of the roofline, when there is one. */
  fraction?: number;
  goal?: string;
  note?: string;
  seconds: number;
  /** On a PyTorch row: what it measures ("compiled SHAPE", "prefill SHAPE N"); on a poot row: which of those it is read against. */
  anchor?: string;
  versus?: string;
  /** The card a poot row ran on (its command's JSON names it); a PyTorch row's copy ceiling there, TB/s. */
  device?: string;
  ceiling?: number;
}

export interface Job {
  group: string;
  /** Command (argv[0] "deno" means this runtime's executable) and its time bound. */
  cmd: string[];
  timeoutS: number;
  /** The JSON result's file name in a fresh folder the command gets as $OUT (where it does not print it). */
  file?: string;
  /** Rows from the command's JSON output; `err` is the failure line when it produced none. */
  rows(json: Json): Omit<SuiteRow, "group" | "seconds">[];
  /** The names its rows would have (printed with the failure when it fails). */
  names: string[];
  skip?: string;
}

/** Issue 16's goals for the quantized decode rows (fractions of the roofline), by shape and weights. */
const QUANT_GOALS: Record<string, string> = { "llama-3-8b q4_k_m": ">= 60% of roofline", "llama-3-8b q8_0": ">= 75% of roofline" };
const SHAPE_GOALS: Record<string, { goal: string; pytorch: number }> = {
  "llama-3.2-1b": { goal: ">= 1380 tok/s (80%)", pytorch: 743 },
  "qwen2.5-0.5b": { goal: ">= 2800 tok/s (65%)", pytorch: 856 },
  "llama-3-8b": { goal: ">= 256 tok/s (91%)", pytorch: 186 },
};
// PyTorch eager (SDPA, cuBLAS) time to first token on the H200, from issue 18.
const PREFILL_REF: Record<string, Record<number, number>> = { "llama-3.2-1b": { 512: 23.1, 2048: 25.7 }, "llama-3-8b": { 512: 50.8, 2048: 75.3 } };

function which(cmd: string): string | undefined {
  const r = spawnSync(cmd, ["--version"], { encoding: "utf8", timeout: 10_000 });
  return r.status === 0 ? r.stdout.trim().split("\n")[0] : undefined;
}

/** The anchors' folder's problem, or undefined when the PyTorch rows can run from it. */
function anchorsMissing(dir: string, script: string): string | undefined {
  for (const f of [script, "gf_model.py"]) if (!existsSync(join(dir, f))) return `${join(dir, f)} is missing (--anchors DIR holds gptfast_decode.py, torch_prefill.py and gpt-fast's model.py as gf_model.py)`;
  return which("python3") ? undefined : "python3 is not on PATH";
}

// The anchor script's names for the bench's shapes (its qwen2.5-0.5b has no q/k/v bias and an untied head).
const ANCHOR_SHAPE: Record<string, string> = { "llama-3.2-1b": "llama-3.2-1b", "qwen2.5-0.5b-like": "qwen2.5-0.5b", "llama-3-8b": "llama-3-8b" };
const compiledName = (shape: string) => `${shape} PyTorch compiled (gpt-fast, reduce-overhead, CUDA graphs), bf16`;
const eagerName = (shape: string, n: number) => `${shape} PyTorch eager (SDPA, cuBLAS): time to first token, ${n}-token prompt`;
const PREFILL_TOKENS = [512, 2048];

export function jobs(groups: Set<string>, backend: string, shapes: string[], anchors = ".dev/anchor"): Job[] {
  const deno = (...a: string[]) => ["deno", "run", "-A", "--no-check", ...a];
  // tag "" is the PTX decode row (the issue's goals and PyTorch reference); others carry their own goal.
  // goalOf: one goal for every row, or one per row (a quantized row's, "" for none)
  const decodeRows = (tag: string, goalOf?: string | ((r: { shape: string; dtype: string }) => string | undefined)) => (j: Json) =>
    j.rows.map((r: Json) => {
      const goal = typeof goalOf === "function" ? goalOf(r) ?? "" : goalOf;
      return {
        name: `${r.shape} ${tag}${r.backend} ${r.dtype}, cap ${r.cap}`,
        value: r.replay?.tokPerSec, unit: "tok/s",
        against: r.replay ? `roofline ${(1000 / r.replay.rooflineMs).toFixed(0)} tok/s` : undefined,
        fraction: r.replay?.rooflineFraction,
        goal: goal === "" ? undefined : goal ?? (tag === "" ? SHAPE_GOALS[r.shape]?.goal : undefined),
        note: r.error ?? (SHAPE_GOALS[r.shape] && tag === "" && goal === undefined ? `PyTorch compiled ${SHAPE_GOALS[r.shape].pytorch} tok/s (issue)` : `${r.replay?.msPerToken.toFixed(3)} ms/token, host ${r.replay?.hostMicros.toFixed(0)} µs`),
        versus: SHAPE_GOALS[r.shape] && tag === "" && goal === undefined ? `compiled ${r.shape}` : undefined,
      };
    });
  const out: Job[] = [];
  if (groups.has("decode")) {
    out.push({
      group: "decode", timeoutS: 150, names: shapes, rows: decodeRows(""),
      cmd: deno("bench/decode.ts", "--shape", shapes.join(","), "--backend", backend, "--tokens", "128", "--deep", "0", "--no-eager", "--json"),
    });
  }
  if (groups.has("pytorch")) {
    out.push({
      group: "pytorch", timeoutS: 330, names: Object.values(ANCHOR_SHAPE).map(compiledName), file: "anchors.json",
      cmd: ["env", "SKIP_HF=1", "python3", join(anchors, "gptfast_decode.py")], skip: anchorsMissing(anchors, "gptfast_decode.py"),
      rows: (j) => Object.entries(ANCHOR_SHAPE).map(([key, shape]) => ({
        name: compiledName(shape), value: j[`${key}/gptfast_compiled`], unit: "tok/s", anchor: `compiled ${shape}`, ceiling: j.copy_TBps,
        note: j[`${key}/gptfast_compiled`] === undefined ? "not measured in this run"
          : `eager ${j[`${key}/gptfast_eager`]?.toFixed(0)} tok/s; copy ceiling ${j.copy_TBps?.toFixed(2)} TB/s` + (shape === "llama-3-8b" ? "" : "; reads an untied head"),
      })),
    });
  }
  if (groups.has("deep")) {
    out.push({
      group: "deep", timeoutS: 45, names: ["llama-3.2-1b cap 8192"],
      cmd: deno("bench/decode.ts", "--shape", "llama-3.2-1b", "--backend", backend, "--cap", "8192", "--tokens", "32", "--deep", "4096", "--deep-tokens", "32", "--no-eager", "--json"),
      rows: (j) => j.rows.map((r: Json) => ({
        name: `${r.shape} ${r.backend}, cap ${r.cap}: pos ${r.deep?.pos} over pos 0`,
        value: r.deep && r.replay ? r.deep.msPerToken / r.replay.msPerToken : undefined, unit: "x per token",
        against: r.deep ? `K/V adds ${(100 * (r.deep.bytesPerToken / r.replay.bytesPerToken - 1)).toFixed(1)}% bytes` : undefined,
        goal: "<= 1.10x", note: r.error ?? (r.deep ? `${r.replay.msPerToken.toFixed(3)} -> ${r.deep.msPerToken.toFixed(3)} ms/token, deep ${(100 * r.deep.rooflineFraction).toFixed(1)}% of roofline` : undefined),
      })),
    });
  }
  // the suite's backend, and Vulkan (cooperative matrices where the driver has them)
  for (const [group, b] of [["prefill", backend], ["vulkan-prefill", "vulkan"]]) {
    if (!groups.has(group)) continue;
    for (const shape of ["llama-3.2-1b", "llama-3-8b"]) {
      out.push({
        group, timeoutS: shape === "llama-3-8b" ? 80 : 45, names: [`${shape} ${b} prefill`],
        cmd: deno("bench/driver.ts", "--shape", shape, "--backend", b, "--prompts", "512,2048", "--tokens", "0"),
        rows: (j) => Object.entries(j.ttftMs as Record<string, number>).map(([n, ms]) => ({
          name: `${shape} ${j.backend}: time to first token, ${n}-token prompt (Driver)`, value: ms, unit: "ms",
          against: PREFILL_REF[shape]?.[Number(n)] ? `PyTorch eager ${PREFILL_REF[shape][Number(n)]} ms (issue)` : undefined,
          goal: group === "prefill" && PREFILL_REF[shape]?.[Number(n)] ? `<= ${PREFILL_REF[shape][Number(n)]} ms` : undefined,
          note: `${(Number(n) / ms * 1000).toFixed(0)} prompt tok/s`, versus: `prefill ${shape} ${n}`,
        })),
      });
    }
  }
  if (groups.has("pytorch-prefill")) {
    out.push({
      group: "pytorch-prefill", timeoutS: 150, names: Object.keys(PREFILL_REF).flatMap((x) => PREFILL_TOKENS.map((n) => eagerName(x, n))), file: "prefill.json",
      cmd: ["python3", join(anchors, "torch_prefill.py")], skip: anchorsMissing(anchors, "torch_prefill.py"),
      rows: (j) => Object.keys(PREFILL_REF).flatMap((shape) => PREFILL_TOKENS.map((n) => ({
        name: eagerName(shape, n), value: j[`${shape}/prefill${n}_eager_ms`], unit: "ms",
        anchor: `prefill ${shape} ${n}`,
      }))),
    });
  }
  if (groups.has("host")) {
    out.push({
      group: "host", timeoutS: 30, names: ["stories260K bench"],
      cmd: deno("bench/decode.ts", "--shape", "stories260K", "--backend", backend, "--tokens", "256", "--deep", "0", "--no-eager", "--json"),
      rows: (j) => j.rows.map((r: Json) => ({
        name: `${r.shape} ${r.backend}: host µs per token, bench/decode.ts`, value: r.replay?.hostMicros, unit: "µs",
        goal: "<= 15 µs", note: r.error ?? `${r.replay?.tokPerSec.toFixed(0)} tok/s, ${r.replay?.msPerToken.toFixed(3)} ms/token`,
      })),
    });
    out.push({
      group: "host", timeoutS: 30, names: ["stories260K Driver"],
      cmd: deno("bench/driver.ts", "--shape", "stories260K", "--backend", backend, "--prompts", "64", "--tokens", "256"),
      rows: (j) => [{
        name: `stories260K ${j.backend}: host µs per token, Driver.generate`, value: j.decode?.hostMicros, unit: "µs",
        goal: "<= 25 µs", note: j.decode ? `${j.decode.tokPerSec.toFixed(0)} tok/s, ${j.decode.msPerToken.toFixed(3)} ms/token` : undefined,
      }],
    });
  }
  for (const b of ["vulkan", "wgpu"]) {
    if (!groups.has(b)) continue;
    out.push({
      group: b, timeoutS: 90, names: [`llama-3.2-1b ${b}`, `qwen2.5-0.5b ${b}`],
      rows: decodeRows("", b === "vulkan" ? ">= 80% of the ptx row (issue 23)" : ">= 50% of the ptx row, <= 1 ms host per step (issue 23)"),
      cmd: deno("bench/decode.ts", "--shape", "llama-3.2-1b,qwen2.5-0.5b", "--backend", b, "--tokens", b === "wgpu" ? "32" : "128", "--deep", "0", "--no-eager", "--json"),
    });
  }
  // GGUF block weights (issue 16's goals on the suite's backend; Vulkan and WebGPU against it)
  for (const [group, b] of [["quant", backend], ["vulkan-quant", "vulkan"], ["wgpu-quant", "wgpu"]]) {
    if (!groups.has(group)) continue;
    const shapes = b === "wgpu" ? ["llama-3.2-1b"] : ["llama-3-8b", "llama-3.2-1b"];
    const goal = (r: { shape: string; dtype: string }) => group === "quant" ? QUANT_GOALS[`${r.shape} ${r.dtype}`] : `>= ${b === "vulkan" ? 80 : 50}% of the ${backend} row (issue 23)`;
    out.push({
      group, timeoutS: 200, names: shapes.map((x) => `${x} ${b} q4_k_m, q8_0`),
      rows: decodeRows("", goal),
      cmd: deno("bench/decode.ts", "--shape", shapes.join(","), "--dtype", "q4_k_m,q8_0", "--backend", b, "--tokens", "32", "--deep", "0", "--no-eager", "--json"),
    });
  }
  if (groups.has("bun")) {
    const bun = which("bun");
    out.push({
      group: "bun", timeoutS: 45, names: ["llama-3.2-1b under Bun"], rows: decodeRows("bun, ", "the Deno row's tok/s"),
      cmd: ["bun", "bench/decode.ts", "--shape", "llama-3.2-1b", "--backend", backend, "--tokens", "128", "--deep", "0", "--no-eager", "--json"],
      skip: bun ? undefined : "bun is not on PATH (on the GPU machine: device-prep --bun packs it)",
    });
  }
  return out;
}

export function runJob(job: Job, log: (s: string) => void): SuiteRow[] {
  const fail = (note: string, seconds: number) => job.names.map((name) => ({ group: job.group, name, unit: "", note, seconds }));
  if (job.skip) return fail(`skipped: ${job.skip}`, 0);
  const [bin, ...args] = job.cmd;
  log(`[${job.group}] ${job.cmd.join(" ")} (at most ${job.timeoutS} s)`);
  const t0 = performance.now();
  const dir = job.file ? mkdtempSync(join(tmpdir(), "poot-suite-")) : undefined;
  const r = spawnSync(bin === "deno" ? execPath : bin, args, {
    encoding: "utf8", timeout: job.timeoutS * 1000, killSignal: "SIGKILL", maxBuffer: 64 << 20, env: { ...env, NO_COLOR: "1", ...(dir ? { OUT: dir } : {}) },
  });
  let text = r.stdout ?? "";
  if (dir) {
    try {
      text = readFileSync(join(dir, job.file!), "utf8");
    } catch {
      text = "";
    }
    rmSync(dir, { recursive: true, force: true });
  }
  const seconds = (performance.now() - t0) / 1000;
  const errTail = (r.stderr ?? "").trim().split("\n").slice(-3).join(" | ");
  // a job that writes its JSON to a file prints its progress (the anchors' compile times) on stdout
  for (const line of `${r.stderr ?? ""}\n${dir ? r.stdout ?? "" : ""}`.trim().split("\n")) if (line) log(`  ${line}`);
  if (r.error && (r.error as NodeJS.ErrnoException).code === "ETIMEDOUT" || r.signal) return fail(`timed out after ${job.timeoutS} s: ${errTail}`, seconds);
  if (r.error) return fail(`failed to start: ${r.error.message}`, seconds);
  let json: unknown;
  try {
    text = text.trim();
    json = JSON.parse(text.slice(text.indexOf("{")));
  } catch {
    return fail(`exit ${r.status}, no JSON: ${errTail}`, seconds);
  }
  // the card, as bench/decode.ts and bench/driver.ts name it in their results
  const device: string | undefined = (json as Json)?.device || undefined;
  try {
    return job.rows(json).map((x) => ({ ...(device ? { device } : {}), ...x, group: job.group, seconds }));
  } catch (e) {
    return fail(`exit ${r.status}, unreadable result (${(e as Error).message}): ${errTail}`, seconds);
  }
}

/** Reads each poot row against the PyTorch row of this run it names (`versus`), where that row has a value. */
export function readAgainstAnchors(rows: SuiteRow[]): SuiteRow[] {
  const anchors = new Map(rows.filter((r) => r.anchor && Number.isFinite(r.value)).map((r) => [r.anchor!, r.value!]));
  return rows.map((r) => {
    const a = r.versus === undefined ? undefined : anchors.get(r.versus);
    if (a === undefined || r.value === undefined) return r;
    const compiled = r.versus!.startsWith("compiled ");
    const ratio = compiled ? r.value / a : a / r.value;
    // the parts that come from a reference, the issue's or an earlier reading (so reading twice changes nothing)
    const own = (text?: string) => (text ?? "").split("; ").filter((x) => x && !/\((issue|this run)\)|PyTorch's tok\/s|as fast as PyTorch/.test(x));
    return {
      ...r,
      against: [...own(r.against), `PyTorch ${compiled ? "compiled" : "eager"} ${fmt(a, r.unit)} (this run)`].join("; "),
      note: [...own(r.note), `${ratio.toFixed(2)}x ${compiled ? "PyTorch's tok/s" : "as fast as PyTorch"}`].join("; "),
    };
  });
}

const fmt = (x: number | undefined, unit: string) =>
  x === undefined || !Number.isFinite(x) ? "-" : unit.startsWith("x") ? `${x.toFixed(2)}x` : `${x >= 100 ? x.toFixed(0) : x.toFixed(1)} ${unit}`;

/** The table: Markdown (pasteable into README) with an "old" column when a baseline is given. */
export function formatSuite(rows: SuiteRow[], baseline?: SuiteRow[]): string {
  const old = new Map((baseline ?? []).map((r) => [r.name, r]));
  const head = ["row", ...(baseline ? ["old"] : []), "poot", "roofline / reference", "of roofline", "goal", "notes"];
  const body = rows.map((r) => [
    r.name, ...(baseline ? [fmt(old.get(r.name)?.value, r.unit)] : []), fmt(r.value, r.unit), r.against ?? "",
    r.fraction === undefined ? "" : `${(100 * r.fraction).toFixed(1)}%`, r.goal ?? "", r.note ?? "",
  ]);
  const line = (xs: string[]) => `| ${xs.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...body.map(line)].join("\n");
}

/**
 * The table's first line: when, on which cards, the roofline's rate, and, where a row with a fraction ran on a card
 * that is not an H200, that its fractions are against the H200's rate (with PyTorch's copy ceiling on that card
 * where the rows measured it and name one card: a PyTorch row does not say which card it ran on).
 */
export function suiteHead(rows: SuiteRow[], seconds: number, at = new Date()): string {
  const cards = [...new Set(rows.map((r) => r.device).filter((d): d is string => !!d))];
  const other = [...new Set(rows.filter((r) => r.fraction !== undefined && r.device && !isH200(r.device)).map((r) => r.device!))];
  const ceiling = rows.find((r) => Number.isFinite(r.ceiling))?.ceiling;
  const borrowed = other.length
    ? ` (the H200's measured copy rate: the "of roofline" column on ${other.join(", ")} is against it, not that card's` +
      (ceiling !== undefined && cards.length === 1 ? `; PyTorch's copy ceiling there ${ceiling.toFixed(2)} TB/s` : "") + ")"
    : "";
  return `poot speed table (${at.toISOString()})${cards.length ? ` on ${cards.join(", ")}` : ""}, roofline at ${(H200_BANDWIDTH / 1e12).toFixed(2)} TB/s` +
    `${borrowed}, batch 1, greedy; ${seconds.toFixed(0)} s`;
}

const ALL = ["decode", "pytorch", "deep", "prefill", "pytorch-prefill", "vulkan-prefill", "host", "vulkan", "wgpu", "quant", "vulkan-quant", "wgpu-quant", "bun"];

if (import.meta.main) {
  const { values } = parseFlags("bench/suite.ts", {
    args: argv.slice(2),
    options: {
      rows: { type: "string" }, out: { type: "string" }, baseline: { type: "string" }, backend: { type: "string" }, shapes: { type: "string" },
      anchors: { type: "string" }, from: { type: "string" },
    },
  });
  const groups = new Set((values.rows ?? ALL.join(",")).split(",").map((s) => s.trim()));
  for (const g of groups) {
    if (!ALL.includes(g)) {
      console.error(`bench/suite.ts: --rows: unknown row group ${JSON.stringify(g)} (${ALL.join(", ")})`);
      exit(2);
    }
  }
  let baseline: SuiteRow[] | undefined;
  if (values.baseline) {
    try {
      baseline = JSON.parse(readFileSync(values.baseline, "utf8")).rows;
    } catch (e) {
      console.error(`bench/suite.ts: --baseline ${values.baseline}: ${(e as Error).message}`);
      exit(2);
    }
  }
  const log = (s: string) => void stderr.write(s + "\n");
  const t0 = performance.now();
  const shapes = (values.shapes ?? Object.keys(SHAPE_GOALS).join(",")).split(",").map((x) => x.trim());
  let rows: SuiteRow[] = [];
  if (values.from) {
    // runs that together make the table (a device call's time limit can hold only part of it)
    const byName = new Map<string, number>();
    for (const f of values.from.split(",")) {
      try {
        // a row measured in a later run replaces one of the same name; one without a value never replaces
        for (const r of JSON.parse(readFileSync(f, "utf8")).rows as SuiteRow[]) {
          const at = byName.get(r.name);
          if (at === undefined) byName.set(r.name, rows.push(r) - 1);
          else if (r.value !== undefined) rows[at] = r;
        }
      } catch (e) {
        console.error(`bench/suite.ts: --from ${f}: ${(e as Error).message}`);
        exit(2);
      }
    }
  } else {
    for (const j of jobs(groups, values.backend ?? "ptx", shapes, values.anchors)) {
      rows.push(...runJob(j, log));
      // The rows so far, so that a suite stopped from outside still leaves what it measured.
      if (values.out) writeFileSync(values.out, JSON.stringify({ head: "partial", rows }, null, 1) + "\n");
    }
  }
  rows = readAgainstAnchors(rows);
  const table = formatSuite(rows, baseline);
  const head = suiteHead(rows, (performance.now() - t0) / 1000);
  if (values.out) writeFileSync(values.out, JSON.stringify({ head, rows }, null, 1) + "\n");
  console.log(`${head}\n\n${table}`);
  exit(0);
}
