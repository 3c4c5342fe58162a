// One Kernel object per distinct kernel in this test process: a compiler wrapped by sharingKernels gives each
// program step the first Kernel seen with the same content, so a device's own compile cache (keyed by the Kernel
// object: Vulkan's pipelines, the JS renderer's functions) serves the same kernel in another entry or engine.
// Lavapipe spends tens of ms of LLVM on every pipeline, and the serving tests compile the same model's entries in
// several engines on one device. The programs are unchanged apart from which of two equal Kernel objects a step
// holds; what the device runs is the same (wgpu's device already shares a pipeline per WGSL text).
import type { ProgramCompiler } from "../../backends/executor.ts";
import type { Kernel } from "../../kernels/ir.ts";

const seen = new Map<string, Kernel>();

/** The kernel's content as a key: JSON with the numbers JSON cannot tell apart (NaN, ±Infinity, -0) spelled out. */
function contentKey(k: Kernel): string {
  return JSON.stringify(k, (_, v) =>
    typeof v === "number" && (!Number.isFinite(v) || Object.is(v, -0)) ? `#${Object.is(v, -0) ? "-0" : String(v)}`
    : typeof v === "bigint" ? `#${v}n` : v);
}

/** `compile`, with every kernel step's Kernel replaced by the process's first one of the same content. */
export function sharingKernels(compile: ProgramCompiler): ProgramCompiler {
  return (g, t) => {
    const p = compile(g, t);
    return {
      ...p,
      steps: p.steps.map((s) => {
        if (s.k !== "kernel") return s;
        const key = contentKey(s.kernel);
        const k = seen.get(key);
        if (!k) seen.set(key, s.kernel);
        return k ? { ...s, kernel: k } : s;
      }),
    };
  };
}
