// A kernel into the PTX device's context: rendered for the device (what it cannot run is Unsupported), then loaded:
// the driver JIT-compiles its PTX (cuModuleLoadDataEx), the function gets its dynamic shared memory and carveout,
// and a kernel with checks takes a fault word. A JIT rejection is the renderer's bug (Unsupported), not a dead
// context, unless the driver's code is a fatal one.
import { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, type Cuda, CudaError } from "../../ffi/cuda.ts";
import { Unsupported } from "../errors.ts";
import { type Kernel, KernelError } from "../../kernels/ir.ts";
import type { Caps } from "../../kernels/target.ts";
import type { PtxModule } from "../../kernels/render/ptx.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import { PtxCompiled } from "./handles.ts";
import type { FaultWords } from "./pinned.ts";

/** `kernel` rendered to PTX for `sm` (programmatic dependent launch where `pdl`), or Unsupported where it cannot run there. */
export function renderModule(kernel: Kernel, caps: Caps, o: { sm: number; pdl: boolean | "exit" }): PtxModule {
  if (kernel.uses.f16 && !caps.f16) throw new Unsupported(`ptx: ${kernel.name} needs f16 arithmetic`);
  if (kernel.uses.mma && !caps.mma) throw new Unsupported(`ptx: ${kernel.name} needs warp MMA tiles (sm_80+)`);
  let mod: PtxModule;
  try {
    mod = RENDERERS.ptx.render(kernel, caps, o);
  } catch (e) {
    if (e instanceof KernelError) throw new Unsupported(`ptx: ${e.message}`);
    throw e;
  }
  if (mod.sharedBytes > caps.maxSharedBytes) {
    throw new Unsupported(`ptx: ${kernel.name} needs ${mod.sharedBytes} bytes of shared memory (${caps.maxSharedBytes} available)`);
  }
  return mod;
}

export function loadModule(
  cu: Cuda, kernel: Kernel, mod: PtxModule, o: { carveout?: number; faultWords: FaultWords; fatal: (code: number) => boolean },
): PtxCompiled {
  let loaded: { module: bigint };
  try {
    loaded = cu.moduleLoadDataEx(mod.ptx);
  } catch (e) {
    if (e instanceof CudaError && !o.fatal(e.code)) throw new Unsupported(`ptx: JIT of ${kernel.name} failed: ${e.message}`);
    throw e;
  }
  const func = cu.moduleGetFunction(loaded.module, mod.entry);
  if (mod.dynamicShared > 0) cu.funcSetAttribute(func, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, mod.dynamicShared);
  if (o.carveout !== undefined) cu.funcSetAttribute(func, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, o.carveout);
  const { ptr, fault } = mod.faultParam ? o.faultWords.take() : { ptr: 0n, fault: undefined };
  return new PtxCompiled(kernel, mod, loaded.module, func, ptr, fault);
}
