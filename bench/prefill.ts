// Prefill (time to first token) at real shapes with deterministic random bf16 weights: a prompt of N random
// token ids through the Driver (chunks of its prefill rows, greedy first token), timed after one warm-up run of
// the same length. Several variants in one run, so a table compares them on the same device:
//   mma: tensor-core matmuls and flash attention for chunks of >= 16 rows (the default where the device has
//   them; chunks of >= 128 rows on the staged kernels, kernels/lib/mma_staged.ts, flash_staged.ts);
//   mma-unstaged: without the staged kernels; mma-oldflash: staged matmuls, flash.ts attention; mma-2048: the
//   default in chunks of 2048 rows (then 512, 64, ...); mma-noflash: the same with attention.ts's kernel; fma: the
//   FMA kernel everywhere (and the old [32, 8] chunks unless --prefill says otherwise); unsplit: MMA with x rounded
//   once to bf16 (the default); split: x as hi + lo parts (the default before session 12); prep-apart: the SiLU
//   product by a kernel of its own, not in the down projection's x preparation; flash-split: only flash
//   attention's operands as hi + lo; tiled: the shared-memory tiled matmul (mma off) in chunks of 512/64/16/8
//   rows; untiled-wide: matmul.ts in the same chunks; flash:WARPSxBKV: the default with that staged flash attention
//   layout (CompileOptions.flashLayout); coopflash:WARPSxBC: the cooperative-matrix attention (Vulkan) with that many
//   subgroups and positions per block (CompileOptions.coopFlashLayout); no-blocks: with --dtype a GGUF block type or
//   mix, its matmuls on the tiled FMA kernel instead of the staged MMA kernel over the blocks (CompileOptions.mmaBlocks).
//
//   deno run -A bench/prefill.ts --shape llama-3.2-1b,llama-3-8b --backend ptx --prompts 512,2048
//   deno run -A bench/prefill.ts --shape stories260K --backend js --prompts 32 --variants fma
//   deno run -A bench/prefill.ts --shape llama-3-8b --backend vulkan --dtype q4_k_m --prompts 512,2048 --variants mma,tiled
import { exit } from "node:process";
import { parseArgs } from "node:util";
import { Engine } from "../backends/executor.ts";
import { type BackendChoice, openBackend } from "../backends/open.ts";
import { compileGraph, type CompileOptions } from "../kernels/lower.ts";
import { Driver } from "../llm/driver.ts";
import type { ModelHandle } from "../llm/model.ts";
import { familyOf } from "../llm/registry.ts";
import { type SyntheticDtype, syntheticLlama } from "../llm/synthetic.ts";
import type { Tokenizer } from "../llm/tokenizer/mod.ts";
import { isShapeName, SHAPES } from "./shapes.ts";
import { intList, syntheticDtype } from "./flags.ts";
import { TimedDevice } from "./timed.ts";
import { distinct, timeProgram, timeStep } from "./kernels.ts";
import { parseLayout, parseStaged } from "./mma.ts";
import type { Graph } from "../graph/ir.ts";
import type { DType } from "../graph/dtype.ts";
import type { WeightRole } from "../graph/weights.ts";
import type { LlamaConfig } from "../llm/families/llama.ts";
import { appendSampler } from "../llm/sampling.ts";
import type { Device } from "../backends/device.ts";

const VARIANTS: Record<string, { compile: CompileOptions; prefill?: number[] }> = {
  mma: { compile: { mma: "auto" } },
  // the MMA matmul without shared-memory staging (session 5's prefill path), and the default in 2048-row chunks
  "mma-unstaged": { compile: { mma: "auto", staged: false, flashStaged: false } },
  "mma-2048": { compile: { mma: "auto" }, prefill: [2048, 512, 64, 16, 8] },
  "mma-oldflash": { compile: { mma: "auto", flashStaged: false } },
  "mma-noflash": { compile: { mma: "auto", flash: false } },
  "mma-nosplit": { compile: { mma: "auto", flashSplits: 1 } },
  unsplit: { compile: { mma: "auto", mmaSplit: false } },
  split: { compile: { mma: "auto", mmaSplit: true } },
  "prep-apart": { compile: { mma: "auto", mmaPrepFuse: false } },
  "flash-split": { compile: { mma: "auto", flashSplit: true } },
  // GGUF block weights' matmuls on the tiled FMA kernel (x and W in f32), not the staged MMA kernel over the blocks
  "no-blocks": { compile: { mma: "auto", mmaBlocks: false } },
  fma: { compile: { mma: "off" }, prefill: [32, 8] },
  "fma-wide": { compile: { mma: "off" } },
  // the shared-memory tiled matmul (kernels/lib/tiled_matmul.ts) in wide chunks, and matmul.ts in the same chunks
  tiled: { compile: { mma: "off", tiled: true }, prefill: [512, 64, 16, 8] },
  "untiled-wide": { compile: { mma: "off", tiled: false }, prefill: [512, 64, 16, 8] },
};

export interface PrefillRow {
  shape: string;
  variant: string;
  prompt: number;
  ms: number;
  chunks: string;
}

/** A Markdown table. */
function formatTable(head: string[], rows: string[][]): string {
  const line = (xs: string[]) => `| ${xs.join(" | ")} |`;
  return [line(head), line(head.map(() => "---")), ...rows.map(line)].join("\n");
}

const NO_TEXT = { decoder: () => ({ push: () => "", flush: () => "" }), isEog: () => false, eog: new Set<number>() } as unknown as Tokenizer;

export async function runPrefillBench(o: {
  shapes: string[];
  backend: BackendChoice;
  prompts: number[];
  variants: string[];
  /** Weight dtype or llama-quantize mix (default bf16). */
  dtype?: SyntheticDtype;
  prefill?: number[];
  /** Tiling of the prefill MMA matmuls (CompileOptions.mmaLayout), for the mma variants. */
  layout?: CompileOptions["mmaLayout"];
  /** Tiling of the staged matmuls (CompileOptions.stagedLayout). */
  stagedLayout?: CompileOptions["stagedLayout"];
  /** Warps and tile of the staged flash attention (CompileOptions.flashLayout). */
  flashLayout?: CompileOptions["flashLayout"];
  reps: number;
  /** Also time one chunk's program by kernel (rows, at position `at`), per variant. */
  profile?: { rows: number; at: number };
  log: (s: string) => void;
}): Promise<PrefillRow[]> {
  const rows: PrefillRow[] = [];
  for (const name of o.shapes) {
    if (!isShapeName(name)) throw new RangeError(`unknown shape ${name}: ${Object.keys(SHAPES).join(", ")}`);
    const c = SHAPES[name];
    const syn = syntheticLlama(c, { dtype: o.dtype ?? "bf16", scratch: true });
    const ctx = Math.max(...o.prompts) + 16;
    for (const v of o.variants) {
      // flash:WARPSxBKV: the default with that staged flash attention layout
      const spec = VARIANTS[v] ?? (v.startsWith("flash:") ? { compile: { mma: "auto" as const, flashLayout: flashLayoutOf(v.slice(6)) } }
        : v.startsWith("coopflash:") ? { compile: { mma: "auto" as const, coopFlashLayout: coopFlashLayoutOf(v.slice(10)) } } : undefined);
      if (!spec) throw new RangeError(`unknown variant ${v}: ${Object.keys(VARIANTS).join(", ")}, flash:WARPSxBKV, coopflash:WARPSxBC`);
      const model = {
        arch: "llama", family: familyOf("llama"), config: c, format: "hf", store: syn.store, map: syn.map, tokenizer: NO_TEXT,
        path: name, contextLength: ctx, close() {},
      } as unknown as ModelHandle;
      const dev = new TimedDevice(await openBackend(o.backend));
      const copts: CompileOptions = { mmaLayout: o.layout, stagedLayout: o.stagedLayout, flashLayout: o.flashLayout, ...spec.compile };
      const engine = new Engine(dev, { compile: (g, t, o) => compileGraph(g, t, { ...copts, ...o }) });
      const t0 = performance.now();
      const driver = await Driver.open(model, engine, { ctx, prefill: o.prefill ?? spec.prefill });
      const chunks = (driver as unknown as { steps: { prefillRows: number[] } }).steps.prefillRows.join(",");
      o.log(`${name} ${v}: loaded in ${((performance.now() - t0) / 1000).toFixed(1)} s, prefill chunks ${chunks}`);
      try {
        for (const p of o.prompts) {
          const ids = Array.from({ length: p }, (_, i) => 1 + ((i * 7919) % (c.vocab - 1)));
          await driver.generate(ids, { maxTokens: 1, ignoreEos: true }); // warm-up (first replays, lazy work)
          dev.take(); // count the timed runs only
          const times: number[] = [];
          for (let r = 0; r < o.reps; r++) {
            const t = performance.now();
            await driver.generate(ids, { maxTokens: 1, ignoreEos: true });
            times.push(performance.now() - t);
          }
          const t = dev.take(), n = o.reps;
          o.log(`    host per run: write ${(t.write / n).toFixed(1)} ms, issue ${(t.issue / n).toFixed(1)} ms, wait ${(t.wait / n).toFixed(1)} ms, ` +
            `read ${(t.read / n).toFixed(1)} ms, compile ${(t.compile / n).toFixed(1)} ms, record ${(t.record / n).toFixed(1)} ms`);
          const ms = Math.min(...times);
          rows.push({ shape: name, variant: v, prompt: p, ms, chunks });
          o.log(`  prompt ${p}: ${ms.toFixed(2)} ms (best of ${o.reps}: ${times.map((x) => x.toFixed(1)).join(" ")})`);
        }
        if (o.profile) await profile(dev.inner, c, o.profile.rows, o.profile.at, copts, o.log, syn.dtypeOf);
      } finally {
        await driver.close();
      }
    }
  }
  return rows;
}

/** One chunk's step graph as the Driver builds it (last-row logits, sampler). */
function chunkGraph(c: LlamaConfig, rows: number, cap: number, dtypeOf: (r: WeightRole) => DType): Graph {
  const { tracer, logits } = familyOf("llama").trace(c, { rows, cap }, { dtypeOf });
  const lm = tracer.nodes[logits.id];
  const x = tracer.nodes[lm.inputs[0]];
  appendSampler(tracer, rows === 1 ? logits : tracer.matmul(tracer.slice(x, 0, rows - 1, rows), tracer.nodes[lm.inputs[1]]));
  return tracer.build();
}

/** Device time of one chunk's program (zeroed weights) and of its kernels, the costliest first. */
async function profile(dev: Device, c: LlamaConfig, rows: number, at: number, opts: CompileOptions, log: (s: string) => void, dtypeOf: (r: WeightRole) => DType): Promise<void> {
  const cap = at + rows + 16;
  const prog = compileGraph(chunkGraph(c, rows, cap, dtypeOf), dev.target, opts);
  const whole = await timeProgram(dev, prog, 5, at);
  log(`  profile: a ${rows}-row chunk at position ${at}: ${whole.queued.toFixed(2)} ms queued, ${whole.synced.toFixed(2)} ms synced`);
  const rowsOut: { name: string; count: number; us: number }[] = [];
  for (const { step, count } of distinct(prog)) {
    rowsOut.push({ name: step.kernel.name, count, us: await timeStep(dev, prog, step, Math.min(20, Math.max(3, count)), at) });
  }
  rowsOut.sort((a, b) => b.us * b.count - a.us * a.count);
  for (const r of rowsOut.slice(0, 14)) log(`    ${(r.us * r.count / 1000).toFixed(2)} ms = ${r.count} x ${r.us.toFixed(1)} µs  ${r.name}`);
}

/** coopflash:WARPSxBC: the cooperative-matrix attention's subgroups and positions per block (Vulkan). */
function coopFlashLayoutOf(v: string): CompileOptions["coopFlashLayout"] {
  const [warps, bc] = v.split("x").map(Number);
  if (!(warps >= 1 && bc >= 16)) throw new RangeError(`coopflash:${v}: WARPSxBC, e.g. 4x64`);
  return { warps, bc };
}

/** --flash-layout WARPSxBKV. */
function flashLayoutOf(v: string): CompileOptions["flashLayout"] {
  const m = /^(\d+)x(\d+)$/.exec(v);
  if (!m) throw new RangeError(`--flash-layout: ${v} is not WARPSxBKV (e.g. 8x64)`);
  return { warps: Number(m[1]), bkv: Number(m[2]) };
}

export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args, strict: true, allowPositionals: false,
    options: {
      shape: { type: "string", default: "llama-3.2-1b" },
      backend: { type: "string", default: "auto" },
      prompts: { type: "string", default: "512,2048" },
      variants: { type: "string", default: "mma,fma" },
      // weight dtype or llama-quantize mix of the synthetic model (bf16, q4_k_m, q8_0, ...)
      dtype: { type: "string", default: "bf16" },
      prefill: { type: "string" },
      reps: { type: "string", default: "3" },
      // ROWS@POS: time one chunk's program by kernel
      profile: { type: "string" },
      // tiling of the prefill MMA matmuls, as bench/mma.ts variants: e.g. 2x4:ks1:w4x2
      "mma-layout": { type: "string" },
      // tiling of the staged matmuls, as bench/mma.ts staged variants: e.g. 128x256x32:s3:w2x4
      "staged-layout": { type: "string" },
      // warps and positions per tile of the staged flash attention: WARPSxBKV, e.g. 8x64
      "flash-layout": { type: "string" },
    },
  });
  const ints = (v: string, what: string) => intList(what, v);
  const rows = await runPrefillBench({
    shapes: values.shape!.split(","), backend: values.backend as BackendChoice, prompts: ints(values.prompts!, "prompts"),
    variants: values.variants!.split(","), dtype: syntheticDtype(values.dtype!), prefill: values.prefill ? ints(values.prefill, "prefill") : undefined,
    reps: ints(values.reps!, "reps")[0], log: (s) => console.error(s),
    layout: values["mma-layout"] ? parseLayout(values["mma-layout"].split(":")) : undefined,
    stagedLayout: values["staged-layout"] ? parseStaged(values["staged-layout"].split(":")) : undefined,
    flashLayout: values["flash-layout"] ? flashLayoutOf(values["flash-layout"]) : undefined,
    profile: values.profile ? { rows: Number(values.profile.split("@")[0]), at: Number(values.profile.split("@")[1] ?? 0) } : undefined,
  });
  console.log(formatTable(
    ["shape", "variant", "prompt", "TTFT ms", "tok/s", "chunks"],
    rows.map((r) => [r.shape, r.variant, String(r.prompt), r.ms.toFixed(2), (r.prompt / (r.ms / 1000)).toFixed(0), r.chunks]),
  ));
  return 0;
}

if (import.meta.main) {
  try {
    exit(await main((globalThis as unknown as { Deno?: { args: string[] } }).Deno?.args ?? (await import("node:process")).argv.slice(2)));
  } catch (e) {
    console.error(`prefill bench: ${(e as Error).message}`);
    exit(1);
  }
}
