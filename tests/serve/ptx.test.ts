// The serving step's kernels for the H200 without a GPU: every kernel of the batched entries (1, 32 and 48 rows,
// f16 paged pool, bf16 weights; also 32-row matmul passes and the subgroup paged attention the MMA one replaced) at the 1B and 8B shapes renders to PTX and assembles with `ptxas -arch=sm_90`.
// Skips when ptxas is absent.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { type PtxModule, renderPtx } from "../../kernels/render/ptx.ts";
import { traceLlama } from "../../llm/families/llama.ts";
import { servingCompile, servingCompileWith, servingGraph } from "../../llm/serve/batch.ts";
import { loadModel } from "../../llm/model.ts";
import { FIXTURES } from "../families/fixtures.ts";
import { appendSampler } from "../../llm/sampling.ts";
import { SHAPES } from "../../bench/shapes.ts";
import { assembleMany, findPtxas } from "../ptx/ptxas.ts";

const ptxas = findPtxas();
const skip = ptxas ? false : "ptxas not found (set PTXAS or install the CUDA toolkit)";
const TARGET: TargetSet = { backend: "ptx", device: "sm_90 (no device)", caps: SM90_CAPS, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };

test("serving step kernels (batched, paged f16 pool) assemble for sm_90 at the 1B and 8B shapes", { skip, timeout: 300_000 }, () => {
  const mods = new Map<string, PtxModule>();
  for (const name of ["llama-3.2-1b", "llama-3-8b"] as const) {
    const cfg = SHAPES[name];
    const dtypeOf = (r: { role: string }) => (!r.role.endsWith("norm") && r.role !== "tok_embd" ? "bf16" : "f32");
    for (const rows of [1, 32, 48]) {
      const { tracer, logits } = traceLlama(cfg, { rows, cap: 1024, kvDtype: "f16", batch: { block: 16, blocks: 2049, maxBlocks: 64 } }, { dtypeOf });
      appendSampler(tracer, logits);
      const g = tracer.build();
      // The default matmul tile, and 32 rows a pass (bench/serve.ts --matmul-tile 32) for the batch of 32.
      // The default (paged attention on MMA tiles), and the subgroup paged attention (pagedFlash off) at 1 and 32 rows.
      const progs = [
        servingCompile(g, TARGET), ...(rows === 32 ? [servingCompileWith({ matmulTile: 32 })(g, TARGET)] : []),
        ...(rows !== 48 ? [servingCompileWith({ pagedFlash: false })(g, TARGET)] : []),
      ];
      for (const s of progs.flatMap((p) => p.steps)) {
        if (s.k !== "kernel" || [...mods.values()].some((m) => m.kernel.name === s.kernel.name)) continue;
        const m = renderPtx(s.kernel, { sm: 90 });
        mods.set(m.ptx, m);
      }
    }
  }
  assert.ok([...mods.values()].some((m) => /^attention_.*_b16_m64_i32/.test(m.kernel.name)), "the subgroup paged attention is in the pagedFlash: false plan");
  assert.ok([...mods.values()].some((m) => /^paged_flash_r32_.*_f16_.*_b16_m64_i32/.test(m.kernel.name)), "the MMA paged attention is in the default plan");
  const results = assembleMany(ptxas!, [...mods.values()], "sm_90");
  const bad = results.flatMap((r, i) => (r.ok ? [] : [`${[...mods.values()][i].kernel.name}: ${r.log.split("\n").slice(0, 4).join(" | ")}`]));
  assert.deepEqual(bad, []);
});

// The paged attention with a sliding window and a soft cap (Gemma 2 and 3, Mistral's sliding layers) in the serving
// step of each family fixture that has them, at its own head width (the subgroup kernel) and at 128 (Gemma 3's,
// Mistral's: the MMA kernel), through ptxas.
test("serving step kernels with a window and a soft cap (gemma2, gemma3, mistral fixtures) assemble for sm_90", { skip, timeout: 300_000 }, () => {
  const mods = new Map<string, PtxModule>();
  for (const family of ["gemma2", "gemma3", "mistral"]) {
    const m = loadModel(`${FIXTURES}${family}`);
    try {
      // (gemma3's q/k norms are weights of the head's width: its own width only)
      for (const headDim of family === "gemma3" ? [m.config.headDim] : [m.config.headDim, 128]) {
        const model = { ...m, config: { ...m.config, headDim } } as typeof m;
        for (const rows of [1, 32]) {
          const { graph } = servingGraph(model, rows, { slots: 8, pool: { block: 16, blocks: 65, maxBlocks: 8, bytes: 0 }, kvDtype: "f16" }, 9, { rows: 8, writes: 32 });
          for (const s of servingCompile(graph, TARGET).steps) {
            if (s.k !== "kernel") continue;
            const r = renderPtx(s.kernel, { sm: 90 });
            mods.set(r.ptx, r);
          }
        }
      }
    } finally {
      m.close();
    }
  }
  const names = [...mods.values()].map((m) => m.kernel.name);
  for (const re of [/^paged_flash_.*_w8_cap5_/, /^paged_flash_.*_w8_/, /^attention_partial_.*_w8_cap5_/]) {
    assert.ok(names.some((n) => re.test(n)), `${re} in the plans: ${names.filter((n) => /attention|flash/.test(n))}`);
  }
  const results = assembleMany(ptxas!, [...mods.values()], "sm_90");
  const bad = results.flatMap((r, i) => (r.ok ? [] : [`${[...mods.values()][i].kernel.name}: ${r.log.split("\n").slice(0, 4).join(" | ")}`]));
  assert.deepEqual(bad, []);
});
