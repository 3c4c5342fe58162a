// The quantized decode gemvs of the 8B shape (llama-quantize's q4_k_m and q8_0 mixes) render and assemble for
// sm_90 on both paths: int8 x with dp4a (CompileOptions.quantizedX, the ptx default) and the f32 path. Skips
// when ptxas is absent.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type PtxModule, renderPtx } from "../../kernels/render/ptx.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { SHAPES } from "../../bench/shapes.ts";
import { assembleMany, findPtxas } from "./ptxas.ts";

const ptxas = findPtxas();
const skip = ptxas ? false : "ptxas not found (set PTXAS or install the CUDA toolkit)";
const TARGET: TargetSet = { backend: "ptx", device: "sm_90 (no device)", caps: SM90_CAPS, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };

test("8B q4_k_m and q8_0 decode gemvs assemble for sm_90, int8 x (dp4a) and f32 paths", { skip, timeout: 300_000 }, () => {
  const c = SHAPES["llama-3-8b"];
  const mods: PtxModule[] = [];
  for (const dtype of ["q4_k_m", "q8_0"] as const) {
    for (const quantizedX of [true, false]) {
      const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 256, kvDtype: "f16" }, { dtypeOf: syntheticLlama(c, { dtype }).dtypeOf });
      tracer.output("logits", logits);
      const prog = compileGraph(tracer.build(), TARGET, { quantizedX });
      const names = new Set<string>();
      for (const s of prog.steps) {
        if (s.k !== "kernel" || !s.kernel.name.startsWith("gemv_q") || names.has(s.kernel.name)) continue;
        names.add(s.kernel.name);
        mods.push(renderPtx(s.kernel, { sm: 90 }));
      }
      const xq = [...names].filter((n) => /^gemv_q\w+x8_/.test(n));
      // q4_k_m: q4_k and q6_k gemvs (attention v, down of some layers, the head); q8_0: every gemv
      assert.equal(xq.length, quantizedX ? names.size : 0, `${dtype} quantizedX ${quantizedX}: ${[...names].join(", ")}`);
      assert.ok(names.size >= 4, `${dtype}: ${names.size} quantized gemvs`);
      if (quantizedX) for (const m of mods.slice(-names.size)) assert.match(m.ptx, /dp4a\.s32\.s32/, m.kernel.name);
    }
  }
  const results = assembleMany(ptxas!, mods, "sm_90");
  const bad = results.flatMap((r, i) => (r.ok ? [] : [`${mods[i].kernel.name}: ${r.log.split("\n").slice(0, 6).join(" | ")}`]));
  assert.deepEqual(bad, []);
});
