// The default kernel compiler of the ROCm device: the amdgpu renderer (kernels/render/amdgpu: kernel IR ->
// LLVM IR -> code object through comgr, with its launch metadata), for the agent's gfx target.
import type { Kernel } from "../../kernels/ir.ts";
import { AmdCompiler, comgr } from "../../kernels/render/amdgpu/compile.ts";
import { amdTarget } from "../../kernels/render/amdgpu/targets.ts";
import { Unsupported } from "../errors.ts";
import type { RocmAgent } from "./agent.ts";
import type { AmdgpuCode } from "./kernarg.ts";

/** Compiles a kernel to a code object for the agent's target. */
export type AmdgpuCompiler = (kernel: Kernel, agent: RocmAgent) => AmdgpuCode;

/** The amdgpu renderer's compiler for this process, or why there is none (no libamd_comgr). */
export function loadAmdgpuCompiler(): Promise<AmdgpuCompiler | string> {
  return Promise.resolve(amdgpuCompiler());
}

function amdgpuCompiler(): AmdgpuCompiler | string {
  const cg = comgr();
  if (typeof cg === "string") return `libamd_comgr is not available: ${cg}`;
  const compiler = new AmdCompiler(cg);
  return (kernel, agent) => {
    const target = amdTarget(agent.isa);
    if (!target) throw new Unsupported(`rocm: the amdgpu renderer has no target ${agent.gfx}`);
    const co = compiler.compile(kernel, target);
    // An older comgr builds some targets only as a stand-in of the same generation, which the agent cannot load.
    if (co.processor !== agent.gfx) throw new Unsupported(`rocm: this comgr builds ${agent.gfx} code only as ${co.processor}, which the ${agent.gfx} agent cannot load`);
    return { elf: co.elf, meta: co.meta };
  };
}
