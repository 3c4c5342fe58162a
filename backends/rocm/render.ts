// The default kernel compiler of the ROCm device: the amdgpu renderer (kernels/render/amdgpu: kernel IR ->
// LLVM IR -> code object through comgr, with its launch metadata), for the agent's gfx target.
//
// It is imported when a device with an agent opens, by a specifier held in a variable, so this backend builds
// and runs its tests in a tree without that renderer (the two halves of issue 19 were written side by side);
// such a tree's device opens as absent, saying so. Once both are in one tree a static import is equivalent
// (and what a bundler such as `bun build --compile` needs to include the renderer).
import type { Kernel } from "../../kernels/ir.ts";
import { Unsupported } from "../errors.ts";
import type { RocmAgent } from "./agent.ts";
import type { AmdgpuCode, AmdgpuKernelMeta } from "./kernarg.ts";

/** Compiles a kernel to a code object for the agent's target. */
export type AmdgpuCompiler = (kernel: Kernel, agent: RocmAgent) => AmdgpuCode;

/** What the device uses of kernels/render/amdgpu/compile.ts and targets.ts. */
interface CompileModule {
  comgr(): object | string;
  AmdCompiler: new (cg: object) => { compile(k: Kernel, t: object): { processor: string; elf: Uint8Array; meta: AmdgpuKernelMeta } };
}
interface TargetsModule {
  amdTarget(processor: string): { name: string } | undefined;
}
const COMPILE = "../../kernels/render/amdgpu/compile.ts";
const TARGETS = "../../kernels/render/amdgpu/targets.ts";

/** The amdgpu renderer's compiler for this process, or why there is none (no renderer, no libamd_comgr). */
export async function loadAmdgpuCompiler(): Promise<AmdgpuCompiler | string> {
  let c: CompileModule, t: TargetsModule;
  try {
    [c, t] = await Promise.all([import(COMPILE) as Promise<CompileModule>, import(TARGETS) as Promise<TargetsModule>]);
  } catch (e) {
    return `this build has no amdgpu renderer (kernels/render/amdgpu): ${(e as Error).message.split("\n")[0]}`;
  }
  const cg = c.comgr();
  if (typeof cg === "string") return `libamd_comgr is not available: ${cg}`;
  const compiler = new c.AmdCompiler(cg);
  return (kernel, agent) => {
    const target = t.amdTarget(agent.isa);
    if (!target) throw new Unsupported(`rocm: the amdgpu renderer has no target ${agent.gfx}`);
    const co = compiler.compile(kernel, target);
    // An older comgr builds some targets only as a stand-in of the same generation, which the agent cannot load.
    if (co.processor !== agent.gfx) throw new Unsupported(`rocm: this comgr builds ${agent.gfx} code only as ${co.processor}, which the ${agent.gfx} agent cannot load`);
    return { elf: co.elf, meta: co.meta };
  };
}
