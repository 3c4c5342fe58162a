// `poot info --dump-kernels`: the decode plan's kernels rendered for a target, with that target's capabilities
// (the device's own when it is present, else those of a typical device of the kind: targetFor).
import type { ModelHandle } from "../llm/model.ts";
import { dtypesFromStore } from "../llm/families/family.ts";
import { compileGraph } from "../kernels/lower.ts";
import type { Kernel } from "../kernels/ir.ts";
import { type Caps, JS_CAPS, type TargetSet } from "../kernels/target.ts";
import type { Program } from "../kernels/program.ts";
import { renderSpirv } from "../kernels/render/spirv.ts";
import { renderWgsl } from "../kernels/render/wgsl.ts";
import { renderPtx } from "../kernels/render/ptx/kernel.ts";
import { renderJs } from "../kernels/render/js.ts";

export const TARGETS = ["ptx", "spirv", "wgsl", "js"] as const;
export type RenderTarget = (typeof TARGETS)[number];

const GPU: Caps = {
  subgroups: true, subgroupSize: 32, f16: true, storage16: true, storage8: true, trap: false,
  maxWorkgroupSize: 1024, maxWorkgroupsPerDim: [65535, 65535, 65535], maxSharedBytes: 48 * 1024,
  maxBindingBytes: 2 ** 31, bindingAlign: 256,
};
const CAPS: Record<RenderTarget, Caps> = {
  ptx: { ...GPU, trap: true, maxWorkgroupsPerDim: [2 ** 31 - 1, 65535, 65535] },
  spirv: GPU,
  wgsl: { ...GPU, f16: false, storage16: false, storage8: false, maxWorkgroupSize: 256, maxSharedBytes: 16384, maxBindingBytes: 2 ** 27 },
  js: { ...JS_CAPS, subgroupSize: 1 },
};

/** The backend whose device a target's kernels run on. */
export function backendOf(t: RenderTarget): "ptx" | "vulkan" | "wgpu" | "js" {
  return t === "spirv" ? "vulkan" : t === "wgsl" ? "wgpu" : t;
}

/** A typical device of the target's kind, for when none is present. */
export function targetFor(t: RenderTarget): TargetSet {
  const backend = t === "spirv" ? "vulkan" : t === "wgsl" ? "wgpu" : t;
  return { backend, device: `typical ${t} device`, caps: CAPS[t], memory: { totalBytes: 0 }, watchdogBudget: 0 };
}

/** The decode step of a model (greedy suffix) lowered for a target set (a present device's or targetFor's). */
export function decodeProgram(model: ModelHandle, target: TargetSet, cap = 256): Program {
  const { tracer, logits } = model.family.trace(model.config, { rows: 1, cap }, { dtypeOf: dtypesFromStore(model.store, model.map) });
  tracer.output("token", tracer.argmax(logits, 1));
  return compileGraph(tracer.build(), target);
}

/** One kernel rendered for `t` with the capabilities `caps` (those the program was lowered for). */
export function renderKernel(k: Kernel, t: RenderTarget, caps: Caps = CAPS[t]): { ext: string; data: string | Uint8Array } {
  switch (t) {
    case "ptx": return { ext: "ptx", data: renderPtx(k, { sm: 90 }).ptx };
    case "spirv": {
      const w = renderSpirv(k, caps).words;
      return { ext: "spv", data: new Uint8Array(w.buffer, w.byteOffset, w.byteLength) };
    }
    case "wgsl": return { ext: "wgsl", data: renderWgsl(k, { f16: caps.f16, subgroups: caps.subgroups }).code };
    case "js": return { ext: "js", data: renderJs(k, { subgroupSize: caps.subgroupSize || 1 }).source };
  }
}
