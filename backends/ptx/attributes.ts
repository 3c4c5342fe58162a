// The driver attributes a PtxDevice reads at open: what capsFromAttributes (caps.ts, FFI-free so CI can render
// without a GPU) derives the caps from, and whether a kernel watchdog runs on the device.
import {
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_WARP_SIZE, type Cuda,
} from "../../ffi/cuda.ts";
import type { CudaAttributes } from "./caps.ts";

const CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5;
const CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT = 17;

/** Device `dev`'s attributes, and `execTimeout`: a display GPU's kernel watchdog is on. */
export function readAttributes(cu: Cuda, dev: number): CudaAttributes & { execTimeout: boolean } {
  const attr = (a: number) => cu.deviceAttribute(a, dev);
  return {
    ccMajor: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
    ccMinor: attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    warpSize: attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    maxThreadsPerBlock: attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    maxGrid: [0, 1, 2].map((i) => attr(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i)) as [number, number, number],
    maxSharedOptin: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    maxSharedPerBlock: attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
    execTimeout: attr(CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT) !== 0,
  };
}
