// Loading a rendered kernel into the PTX device's context: the driver JIT-compiles its PTX (cuModuleLoadDataEx),
// the function gets its dynamic shared memory and carveout, and a kernel with checks takes a fault word. A JIT
// rejection is the renderer's bug (Unsupported), not a dead context, unless the driver's code is a fatal one.
import { CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, type Cuda, CudaError } from "../../ffi/cuda.ts";
import { Unsupported } from "../errors.ts";
import type { Kernel } from "../../kernels/ir.ts";
import type { PtxModule } from "../../kernels/render/ptx.ts";
import { PtxCompiled } from "./handles.ts";
import type { FaultWords } from "./pinned.ts";

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
