// The quantized decode gemvs of the 8B shape (llama-quantize's q4_k_m, q8_0, q5_k_m and q4_0 mixes) render and
// assemble for sm_90 on both paths: int8 x with dp4a (CompileOptions.quantizedX) and the f32 path; by default
// (quantizedX unset) the int path only for the types an H200 measured (kernels/lower/gemv.ts XQ_DEFAULT) (all of these
// mixes' types). Skips when ptxas is absent.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type PtxModule, renderPtx } from "../../kernels/render/ptx.ts";
import { SM90_CAPS } from "../../backends/ptx/caps.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { XQ_DEFAULT, XQ_PREP_DEFAULT } from "../../kernels/lower/gemv.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { SHAPES } from "../../bench/shapes.ts";
import { assembleMany, findPtxas } from "./ptxas.ts";

const ptxas = findPtxas();
const skip = ptxas ? false : "ptxas not found (set PTXAS or install the CUDA toolkit)";
const TARGET: TargetSet = { backend: "ptx", device: "sm_90 (no device)", caps: SM90_CAPS, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };

test("8B q4_k_m, q8_0, q5_k_m, q4_0 decode gemvs assemble for sm_90, int8 x (dp4a) and f32 paths; the default per type", { skip, timeout: 300_000 }, () => {
  const c = SHAPES["llama-3-8b"];
  const mods: PtxModule[] = [];
  // q5_k_m: q5_k (and q6_k) gemvs; q4_0: q4_0 (and the q6_k head). Their f32 paths: tests/quant/render.test.ts.
  for (const dtype of ["q4_k_m", "q8_0", "q5_k_m", "q4_0"] as const) {
    // the f32 paths of q5_k_m and q4_0 assemble in tests/quant/render.test.ts
    const both = dtype === "q4_k_m" || dtype === "q8_0";
    for (const quantizedX of both ? [true, false, undefined] : [true, undefined]) {
      const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 256, kvDtype: "f16" }, { dtypeOf: syntheticLlama(c, { dtype }).dtypeOf });
      tracer.output("logits", logits);
      const prog = compileGraph(tracer.build(), TARGET, { quantizedX });
      const names = new Set<string>();
      for (const s of prog.steps) {
        if (s.k !== "kernel" || !s.kernel.name.startsWith("gemv_q") || names.has(s.kernel.name)) continue;
        names.add(s.kernel.name);
        if (quantizedX !== undefined) mods.push(renderPtx(s.kernel, { sm: 90 }));
      }
      const what = `${dtype} quantizedX ${quantizedX}: ${[...names].join(", ")}`;
      const typed = [...names].map((n) => /^gemv_(q\d_[0-9k])(x8)?(p)?_/.exec(n)!);
      assert.ok(names.size >= 2 && typed.every((m) => m), what);
      // true: every gemv on int8 x; false: none; the default: the measured types only (XQ_DEFAULT); x prepared by
      // a kernel of its own (x8p) for the types of XQ_PREP_DEFAULT (ptx has no dispatch gap)
      for (const [n, t, x8, p] of typed) {
        assert.equal(!!x8, quantizedX ?? XQ_DEFAULT.includes(t), `${n} (${what})`);
        assert.equal(!!p, !!x8 && XQ_PREP_DEFAULT.includes(t), `${n}: prepared x (${what})`);
      }
      if (quantizedX) for (const m of mods.slice(-names.size)) assert.match(m.ptx, /dp4a\.s32\.s32/, m.kernel.name);
    }
  }
  const results = assembleMany(ptxas!, mods, "sm_90");
  const bad = results.flatMap((r, i) => (r.ok ? [] : [`${mods[i].kernel.name}: ${r.log.split("\n").slice(0, 6).join(" | ")}`]));
  assert.deepEqual(bad, []);
});

// x quantized once per gemv (CompileOptions.xqPrep): the prep kernels (with and without the norm, one per weight
// type and width) and the gemvs reading their buffer, at the 8B shape of the same mixes.
test("8B q4_k_m, q8_0, q5_k_m, q4_0 with x prepared (xqPrep): the prep kernels and their gemvs assemble for sm_90", { skip, timeout: 300_000 }, () => {
  const c = SHAPES["llama-3-8b"];
  const mods = new Map<string, PtxModule>();
  for (const dtype of ["q4_k_m", "q8_0", "q5_k_m", "q4_0"] as const) {
    const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 256, kvDtype: "f16" }, { dtypeOf: syntheticLlama(c, { dtype }).dtypeOf });
    tracer.output("logits", logits);
    const prog = compileGraph(tracer.build(), TARGET, { quantizedX: true, xqPrep: true });
    const names = prog.steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : []));
    // every gemv on block weights reads prepared x, right after its prep
    names.forEach((n, i) => {
      if (n.startsWith("gemv_q")) {
        assert.match(n, /^gemv_q\d_[0-9k]x8p_/, `${dtype}: ${n}`);
        assert.match(names[i - 1], /^xq_prep_/, `${dtype}: ${n} after ${names[i - 1]}`);
      }
    });
    assert.ok(names.some((n) => /^xq_prep_.*_norm_/.test(n)) && names.some((n) => /^xq_prep_q\d_[0-9k]_k\d+$/.test(n)), `${dtype}: preps with and without a norm`);
    for (const s of prog.steps) if (s.k === "kernel" && /^(xq_prep_|gemv_q)/.test(s.kernel.name) && !mods.has(s.kernel.name)) mods.set(s.kernel.name, renderPtx(s.kernel, { sm: 90 }));
  }
  const list = [...mods.values()];
  for (const m of list) if (m.kernel.name.startsWith("gemv_")) assert.match(m.ptx, /dp4a\.s32\.s32/, m.kernel.name);
  const bad = assembleMany(ptxas!, list, "sm_90").flatMap((r, i) => (r.ok ? [] : [`${list[i].kernel.name}: ${r.log.split("\n").slice(0, 6).join(" | ")}`]));
  assert.deepEqual(bad, []);
  console.log(`${list.length} kernels assembled: ${[...mods.keys()].filter((n) => n.startsWith("xq_prep_")).join(", ")}`);
});
