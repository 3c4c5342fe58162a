// `poot info --dump-kernels`: the decode plan's kernels rendered for a target, with that target's capabilities
// (the device's own when it is present, else those of a typical device of the kind: targetFor).
import type { ModelHandle } from "../llm/model.ts";
import { dtypesFromStore } from "../llm/families/family.ts";
import { compileGraph } from "../kernels/lower.ts";
import type { Kernel } from "../kernels/ir.ts";
import type { Caps, TargetSet } from "../kernels/target.ts";
import type { Program } from "../kernels/program.ts";
import { RENDER_TARGETS, RENDERERS, renderSource, type RenderTarget } from "../kernels/render/mod.ts";

export const TARGETS = RENDER_TARGETS;
export type { RenderTarget };

/** The backend whose device a target's kernels run on. */
export function backendOf(t: RenderTarget): "ptx" | "vulkan" | "wgpu" | "js" {
  return RENDERERS[t].backend;
}

/** A typical device of the target's kind, for when none is present. */
export function targetFor(t: RenderTarget): TargetSet {
  return { backend: RENDERERS[t].backend, device: `typical ${t} device`, caps: RENDERERS[t].caps, memory: { totalBytes: 0 }, watchdogBudget: 0 };
}

/** The decode step of a model (greedy suffix) lowered for a target set (a present device's or targetFor's). */
export function decodeProgram(model: ModelHandle, target: TargetSet, cap = 256): Program {
  const { tracer, logits } = model.family.trace(model.config, { rows: 1, cap }, { dtypeOf: dtypesFromStore(model.store, model.map) });
  tracer.output("token", tracer.argmax(logits, 1));
  return compileGraph(tracer.build(), target);
}

/** One kernel rendered for `t` with the capabilities `caps` (those the program was lowered for). */
export function renderKernel(k: Kernel, t: RenderTarget, caps: Caps = RENDERERS[t].caps): { ext: string; data: string | Uint8Array } {
  return renderSource(k, t, caps);
}
