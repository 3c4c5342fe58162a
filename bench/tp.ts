// Tensor-parallel decode: batch-1 greedy tok/s of a Llama-shaped model (deterministic synthetic bf16 weights,
// llm/synthetic.ts) at tp 1, 2, 4 on one host, the host time per token spent in collectives, and whether each
// group's greedy tokens equal tp 1's. `--big` adds the 70B shape (Llama-3-70B: 141 GB of bf16 weights, more
// than one H200 holds) at every tp above 1 that fits.
//
//   deno run -A bench/tp.ts --backend ptx --tp 1,2 --shape llama-3-8b --tokens 64 --big   (nvidia-h200-x2)
//   deno run -A bench/tp.ts --backend ptx --tp 1,2,4 --big --out tp.json                 (nvidia-h200-x4)
//   deno run -A bench/tp.ts --backend js --tp 1,2,4 --shape stories260K --tokens 16      (anywhere)
//
// Two ways a group meets (backends/group.ts, column `path`): "device", each rank's collectives recorded as
// NCCL calls inside its CUDA graph (ptx with libnccl: one cuGraphLaunch per GPU per token), and "host", the
// collectives combined on the host between stages (each rank reads back its partial sums, the host adds them,
// each rank gets the result as a slot: correct everywhere, slower than tp 1). `--collectives` picks (default
// auto: device where it can). `--group-of-one` adds a tp 1 row through a one-rank group (its all-reduces are
// NCCL copies): on one GPU that checks the device path against the plain engine's tokens and shows its cost.
// The `collective` column is the time per token in collectives: the host's combine time on the host path, the
// step's NCCL calls replayed alone (launch to completion) on the device path; `stages` the replays per token.
import { argv, exit, stderr } from "node:process";
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Engine, type Executor } from "../backends/executor.ts";
import { type CollectivePath, type GroupStats, openRankGroup, RankGroup } from "../backends/group.ts";
import { type BackendChoice, openBackend } from "../backends/open.ts";
import { compileGraph } from "../kernels/lower.ts";
import type { LlamaConfig } from "../llm/families/llama.ts";
import { familyOf } from "../llm/registry.ts";
import { syntheticLlama } from "../llm/synthetic.ts";
import { tpPlan } from "../llm/tp.ts";
import { isShapeName, SHAPES } from "./shapes.ts";

/** Llama-3-70B's shape (bf16: 70.6e9 parameters, 141 GB). */
export const LLAMA_70B: LlamaConfig = {
  dim: 8192, hidden: 28672, layers: 80, heads: 64, kvHeads: 8, headDim: 128, vocab: 128256,
  rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: false,
};

export interface TpRow {
  shape: string;
  tp: number;
  backend: string;
  device: string;
  weightBytesPerRank: number;
  loadSeconds: number;
  compileSeconds: number;
  tokPerSec: number;
  msPerToken: number;
  /**
   * µs per token in collectives: the host's combine time on the host path; on the device path the device time
   * of the step's collectives recorded and replayed alone (RankGroup.collectiveMicros).
   */
  collectiveMicros: number;
  /** Replays per rank per token (collective boundaries + 1). */
  stages: number;
  /** "engine": tp 1 on one plain engine; "device" / "host": a RankGroup's path. */
  path: string;
  /** Greedy tokens equal tp 1's (undefined when tp 1 did not run for this shape). */
  matchesTp1?: boolean;
  tokens: number[];
  error?: string;
}

function log(s: string): void {
  stderr.write(s + "\n");
}

interface RunOptions {
  backend: BackendChoice;
  tokens: number;
  cap: number;
  collectives: "auto" | CollectivePath;
  /** Run tp 1 as a one-rank group instead of a plain engine. */
  group: boolean;
}

async function runOne(shape: string, c: LlamaConfig, tp: number, o: RunOptions): Promise<TpRow> {
  const { backend, tokens, cap } = o;
  const row: TpRow = { shape, tp, backend, device: "", path: "engine", weightBytesPerRank: 0, loadSeconds: 0, compileSeconds: 0, tokPerSec: 0, msPerToken: 0, collectiveMicros: 0, stages: 1, tokens: [] };
  let exec: Executor | undefined;
  try {
    exec = tp === 1 && !o.group
      ? new Engine(await openBackend(backend), { compile: compileGraph })
      : await openRankGroup(backend, tpPlan({ ...c }, tp, { collectives: true }), { compile: compileGraph, collectives: o.collectives });
    if (exec instanceof RankGroup) row.path = exec.path;
    row.backend = exec.targetSet().backend;
    row.device = exec.targetSet().device;
    const m = syntheticLlama(c, { dtype: "bf16", std: 0.3, scratch: tp === 1 });
    const t0 = performance.now();
    await exec.loadWeights(m.store, m.map, { onTensor: (n, total) => n % 64 === 0 && log(`  ${shape} tp ${tp}: loaded ${n}/${total} tensors`) });
    row.loadSeconds = (performance.now() - t0) / 1000;
    row.weightBytesPerRank = exec.stats().bytes.weights / tp;
    const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap, kvDtype: "f16" }, { dtypeOf: m.dtypeOf });
    tracer.output("token", tracer.argmax(logits, 1));
    const t1 = performance.now();
    const id = exec.addEntry("decode", tracer.build());
    row.compileSeconds = (performance.now() - t1) / 1000;
    let tok = 1;
    const step = async (pos: number) => {
      const r = await exec!.step(id, { token: new Int32Array([tok]), pos: new Int32Array([pos]) });
      tok = r.outputs.token[0];
      return tok;
    };
    for (let p = 0; p < 4; p++) row.tokens.push(await step(p));
    const t2 = performance.now();
    for (let p = 4; p < 4 + tokens; p++) row.tokens.push(await step(p));
    const ms = performance.now() - t2;
    row.msPerToken = ms / tokens;
    row.tokPerSec = 1000 / row.msPerToken;
    if (exec instanceof RankGroup) {
      const s = exec.stats() as GroupStats;
      row.collectiveMicros = await exec.collectiveMicros(id);
      row.stages = s.stagesPerStep;
    }
  } catch (e) {
    row.error = (e as Error).message.split("\n")[0];
  } finally {
    await exec?.unload().catch(() => {});
  }
  return row;
}

function table(rows: TpRow[]): string {
  const head = ["shape", "tp", "path", "device", "GB/rank", "load s", "tok/s", "ms/tok", "collective µs/tok", "stages", "= tp 1"];
  const lines = rows.map((r) => [
    r.shape, String(r.tp), r.path, r.device, (r.weightBytesPerRank / 1e9).toFixed(2), r.loadSeconds.toFixed(1),
    r.error ? "error" : r.tokPerSec.toFixed(1), r.msPerToken.toFixed(2), r.collectiveMicros.toFixed(0), String(r.stages),
    r.matchesTp1 === undefined ? "-" : r.matchesTp1 ? "yes" : "NO",
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i].length)));
  const fmt = (l: string[]) => l.map((x, i) => x.padEnd(w[i])).join("  ");
  const errs = rows.filter((r) => r.error).map((r) => `${r.shape} tp ${r.tp}: ${r.error}`);
  return [fmt(head), ...lines.map(fmt), ...errs].join("\n");
}

export async function runTpBench(o: { backend: BackendChoice; tps: number[]; shapes: string[]; tokens: number; cap: number; big: boolean; collectives?: "auto" | CollectivePath; groupOfOne?: boolean }): Promise<TpRow[]> {
  const rows: TpRow[] = [];
  const plans: [string, LlamaConfig, number[]][] = o.shapes.map((s) => [s, SHAPES[s as keyof typeof SHAPES], o.tps]);
  // 70B at tp 1 is not attempted: 141 GB of weights exceed one H200's 139 GiB usable (the point of the row).
  if (o.big) plans.push(["llama-3-70b", LLAMA_70B, o.tps.filter((t) => t > 1)]);
  for (const [name, c, tps] of plans) {
    let base: number[] | undefined;
    const runs: [number, boolean][] = tps.flatMap((tp): [number, boolean][] => (tp === 1 && o.groupOfOne ? [[1, false], [1, true]] : [[tp, false]]));
    for (const [tp, group] of runs) {
      log(`${name} tp ${tp}${group ? " (a one-rank group)" : ""} ...`);
      const r = await runOne(name, c, tp, { backend: o.backend, tokens: o.tokens, cap: o.cap, collectives: o.collectives ?? "auto", group });
      if (tp === 1 && !group && !r.error) base = r.tokens;
      else if (base && !r.error) r.matchesTp1 = r.tokens.length === base.length && r.tokens.every((t, i) => t === base![i]);
      rows.push(r);
      log(table([r]).split("\n").slice(1).join("\n"));
    }
  }
  return rows;
}

const USAGE = `usage: PROG --tp 1,2[,4] [--shape llama-3-8b,...] [--backend ptx|js|auto] [--collectives auto|device|host] [--group-of-one] [--tokens 64] [--cap 512] [--big] [--json] [--out FILE]
  --tp      group sizes to run (tp 1 is the baseline the others' greedy tokens are compared with)
  --shape   ${Object.keys(SHAPES).join(", ")} (synthetic bf16 weights)
  --big     also the Llama-3-70B shape at every tp above 1
  --collectives  where a group's collectives run: device (NCCL inside each GPU's CUDA graph), host, auto (device where possible)
  --group-of-one also run tp 1 as a one-rank group (its collectives NCCL copies on ptx), compared with the plain tp 1
  --tokens  timed decode tokens per row (after 4 untimed)`;

/** \`poot bench --tp ...\` and \`deno run -A bench/tp.ts ...\`: prints the table; exit 1 when a row failed, 2 on bad flags. */
export async function main(args: string[], opts: { prog?: string; prefix?: string } = {}): Promise<number> {
  const prog = opts.prog ?? "bench/tp.ts";
  const fail = (m: string, code: number) => (console.error(`${opts.prefix ?? prog}: ${m.split("\n")[0]}`), code);
  let o: {
    backend: BackendChoice; tps: number[]; shapes: string[]; tokens: number; cap: number; big: boolean; out?: string; json: boolean;
    collectives: "auto" | CollectivePath; groupOfOne: boolean;
  };
  try {
    const { values } = parseArgs({
      args,
      options: {
        backend: { type: "string", default: "ptx" }, tp: { type: "string", default: "1,2" }, shape: { type: "string", default: "llama-3-8b" },
        tokens: { type: "string", default: "64" }, cap: { type: "string", default: "512" }, big: { type: "boolean", default: false },
        out: { type: "string" }, json: { type: "boolean", default: false }, help: { type: "boolean", short: "h", default: false },
        collectives: { type: "string", default: "auto" }, "group-of-one": { type: "boolean", default: false },
      },
    });
    if (values.help) {
      console.log(USAGE.replace("PROG", prog));
      return 0;
    }
    const tps = values.tp!.split(",").map(Number);
    if (!tps.every((t) => Number.isInteger(t) && t >= 1 && t <= 64)) throw new RangeError(`--tp ${values.tp}: a comma list of integers from 1 to 64`);
    const shapes = values.shape!.split(",");
    for (const s of shapes) if (!isShapeName(s)) throw new RangeError(`--shape ${s}: expected one of ${Object.keys(SHAPES).join(", ")}`);
    const tokens = Number(values.tokens), cap = Number(values.cap);
    if (!Number.isInteger(tokens) || tokens < 1) throw new RangeError(`--tokens ${values.tokens}: a positive integer`);
    if (!Number.isInteger(cap) || cap < tokens + 4) throw new RangeError(`--cap ${values.cap}: an integer >= tokens + 4`);
    if (!["auto", "ptx", "js"].includes(values.backend!)) throw new RangeError(`--backend ${values.backend}: tp runs on ptx or js`);
    if (!["auto", "device", "host"].includes(values.collectives!)) throw new RangeError(`--collectives ${values.collectives}: auto, device or host`);
    o = {
      backend: values.backend as BackendChoice, tps, shapes, tokens, cap, big: values.big!, out: values.out, json: values.json!,
      collectives: values.collectives as "auto" | CollectivePath, groupOfOne: values["group-of-one"]!,
    };
  } catch (e) {
    return fail(`${(e as Error).message} (${prog} --help lists the flags)`, 2);
  }
  const rows = await runTpBench(o);
  const t = table(rows);
  console.log(o.json ? JSON.stringify(rows) : t);
  if (o.out) writeFileSync(o.out, JSON.stringify({ rows, table: t }, null, 2));
  return rows.some((r) => r.error) ? 1 : 0;
}

if (import.meta.main) exit(await main(argv.slice(2)));
