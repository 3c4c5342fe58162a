// `poot info --dump-kernels`: the decode plan's kernels rendered for a target, with that target's capabilities
// (the device's own when it is present, else those of a typical device of the kind: targetFor).
import type { ModelHandle } from "../llm/model.ts";
import { dtypesFromStore } from "../llm/families/family.ts";
import { compileGraph } from "../kernels/lower.ts";
import type { Kernel } from "../kernels/ir.ts";
import type { Backend, Caps, TargetSet } from "../kernels/target.ts";
import { AmdCompiler, comgr } from "../kernels/render/amdgpu/compile.ts";
import type { AmdgpuModule } from "../kernels/render/amdgpu/kernel.ts";
import { AMD_TARGETS, amdTarget, type AmdTarget } from "../kernels/render/amdgpu/targets.ts";
import type { Program } from "../kernels/program.ts";
import { RENDER_TARGETS, RENDERERS, renderSource, type RenderTarget } from "../kernels/render/mod.ts";

export const TARGETS = RENDER_TARGETS;
export type { RenderTarget };

/** The backend whose device a target's kernels run on. */
export function backendOf(t: RenderTarget): Backend {
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

/**
 * The AMDGPU processor a dump compiles for: POOT_AMDGPU_TARGET (gfx90a, gfx942, gfx1100) when set, else the
 * present device's (its name carries "gfx..."), else gfx942 (gfx1100 for wave32 caps).
 */
export function amdDumpTarget(set: TargetSet, env: Record<string, string | undefined> = processEnv()): AmdTarget {
  const want = env.POOT_AMDGPU_TARGET;
  if (want) {
    const t = amdTarget(want);
    if (!t) throw new RangeError(`POOT_AMDGPU_TARGET=${want}: not one of ${Object.keys(AMD_TARGETS).join(", ")}`);
    return t;
  }
  const named = /gfx[0-9a-f]+/.exec(set.device);
  const t = named ? amdTarget(named[0]) : undefined;
  if (t) return t;
  return set.caps.subgroupSize === 32 ? AMD_TARGETS.gfx1100 : AMD_TARGETS.gfx942;
}

function processEnv(): Record<string, string | undefined> {
  return (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
}

let compiler: AmdCompiler | undefined;
/**
 * Files a dump writes beside a kernel's source: for amdgpu the kernel compiled by comgr for `amd`, its
 * assembly (.s) and its launch metadata (.json); a reason instead when comgr is not installed.
 */
export function dumpExtras(k: Kernel, t: RenderTarget, caps: Caps, amd: AmdTarget): { ext: string; data: string }[] | string {
  if (t !== "amdgpu") return [];
  const cg = comgr();
  if (typeof cg === "string") return `no assembly: ${cg}`;
  compiler ??= new AmdCompiler(cg);
  const m = RENDERERS.amdgpu.render(k, caps, { wave: amd.wave }) as AmdgpuModule;
  const co = compiler.compileModule(m, k, amd);
  return [
    { ext: "s", data: compiler.assembly(co, m, amd) },
    { ext: "json", data: JSON.stringify({ target: co.target, processor: co.processor, ...co.meta }, null, 1) + "\n" },
  ];
}
