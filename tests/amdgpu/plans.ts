// The kernels the AMDGPU compile tests build: the stories260K decode plan (the shipped model file) and the
// synthetic Llama 3.2 1B decode plan as bench/decode.ts builds it (bf16 weights, f16 K/V, cap 2048, greedy
// token), each lowered for an AMDGPU target's caps, one entry per distinct kernel with the binding count
// its dispatches pass.
import { fileURLToPath } from "node:url";
import type { Kernel } from "../../kernels/ir.ts";
import { compileGraph } from "../../kernels/lower.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { loadModel } from "../../llm/model.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { decodeProgram } from "../../cli/render.ts";
import { SHAPES } from "../../bench/shapes.ts";
import { type AmdTarget, amdCaps } from "../../kernels/render/amdgpu/targets.ts";
import type { Program } from "../../kernels/program.ts";

export const STORIES = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));

export function amdTargetSet(t: AmdTarget): TargetSet {
  return { backend: "rocm", device: `${t.name} (no device)`, caps: amdCaps(t), memory: { totalBytes: 64 * 2 ** 30 }, watchdogBudget: 0 };
}

export interface PlanKernel {
  kernel: Kernel;
  /** Bindings every dispatch of it passes (the plan's, which the device turns into kernel arguments). */
  bindings: number;
  dispatches: number;
}

function distinct(p: Program): PlanKernel[] {
  const byName = new Map<string, PlanKernel>();
  for (const s of p.steps) {
    if (s.k !== "kernel") continue;
    const got = byName.get(s.kernel.name);
    if (got) {
      got.dispatches++;
      if (got.bindings !== s.bindings.length) throw new Error(`${s.kernel.name}: dispatches bind ${got.bindings} and ${s.bindings.length} buffers`);
    } else byName.set(s.kernel.name, { kernel: s.kernel, bindings: s.bindings.length, dispatches: 1 });
  }
  return [...byName.values()];
}

/** The stories260K decode plan (greedy suffix, cap 256: what `poot info --dump-kernels` dumps). */
export function storiesPlan(t: AmdTarget): PlanKernel[] {
  const model = loadModel(STORIES);
  try {
    return distinct(decodeProgram(model, amdTargetSet(t)));
  } finally {
    model.close();
  }
}

/** The synthetic 1B decode plan of bench/decode.ts (default dtype bf16, K/V f16, cap 2048). */
export function oneBPlan(t: AmdTarget, dtype: "bf16" | "q8_0" | "q4_k_m" = "bf16"): PlanKernel[] {
  const c = SHAPES["llama-3.2-1b"];
  const { dtypeOf } = syntheticLlama(c, { dtype });
  const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 2048, kvDtype: "f16" }, { dtypeOf });
  tracer.output("token", tracer.argmax(logits, 1));
  return distinct(compileGraph(tracer.build(), amdTargetSet(t)));
}
