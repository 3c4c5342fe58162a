// The default kernel compiler of the ROCm device: the amdgpu renderer's entry in the renderer registry
// (kernels/render/mod.ts), which renders the kernel IR to LLVM IR and compiles it to a code object through
// comgr for the agent's ISA. Looked up by name so this backend builds before (and without) that renderer; a
// build without it compiles nothing (Unsupported), and says so.
import type { Kernel } from "../../kernels/ir.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import { Unsupported } from "../errors.ts";
import type { RocmAgent } from "./agent.ts";
import type { AmdgpuCode } from "./kernarg.ts";

interface AmdgpuRenderer {
  render(k: Kernel, caps: RocmAgent["caps"], opts?: { target?: string; isa?: string }): AmdgpuCode;
}

/** Compiles `kernel` for `agent`'s ISA through the registry's amdgpu renderer. */
export function defaultCompiler(kernel: Kernel, agent: RocmAgent): AmdgpuCode {
  const r = (RENDERERS as unknown as Record<string, AmdgpuRenderer | undefined>).amdgpu;
  if (!r) throw new Unsupported("rocm: this build has no amdgpu renderer (kernels/render/amdgpu)");
  const code = r.render(kernel, agent.caps, { target: agent.gfx, isa: agent.isa });
  if (!(code?.codeObject instanceof Uint8Array) || !code.meta) throw new Unsupported("rocm: the amdgpu renderer returned no code object and metadata");
  return code;
}
