// What a CUDA device can do, as the kernel library and the PTX renderer see it. Derived from driver
// attributes on a real device; `SM90_CAPS` is the H200's answer, for rendering PTX without a GPU (CI, info
// --dump-kernels).
import type { Caps } from "../../kernels/target.ts";

/** Driver attributes the caps are derived from (cuDeviceGetAttribute values). */
export interface CudaAttributes {
  ccMajor: number;
  ccMinor: number;
  warpSize: number;
  maxThreadsPerBlock: number;
  maxGrid: [number, number, number];
  /** Opt-in shared memory per block (dynamic shared memory past the 48 KiB static limit). */
  maxSharedOptin: number;
  maxSharedPerBlock: number;
}

/** The PTX .target the renderer emits for a compute capability: sm_80 .. sm_90 (newer GPUs JIT sm_90 PTX). */
export function ptxArch(ccMajor: number, ccMinor: number): number {
  return Math.min(90, ccMajor * 10 + ccMinor);
}

export function capsFromAttributes(a: CudaAttributes): Caps {
  return {
    subgroups: true,
    subgroupSize: a.warpSize,
    f16: a.ccMajor * 10 + a.ccMinor >= 53,
    storage16: true,
    storage8: true,
    trap: true,
    maxWorkgroupSize: a.maxThreadsPerBlock,
    maxWorkgroupsPerDim: a.maxGrid,
    maxSharedBytes: Math.max(a.maxSharedOptin, a.maxSharedPerBlock),
    // Element indices are u32 and addresses 64-bit: 4 GiB per binding keeps every index in range for any type.
    maxBindingBytes: 2 ** 32,
    // 16-byte vector loads and stores need 16-byte aligned binding offsets.
    bindingAlign: 16,
    // programmatic dependent launch overlaps a dependent kernel's launch with the previous one's tail
    dispatchGap: false,
    // warp mma.sync m16n8k16 with bf16/f16 inputs and f32 accumulate (Ampere and newer)
    mma: a.ccMajor >= 8,
    // cp.async global -> shared copies and ldmatrix (Ampere and newer)
    staging: a.ccMajor >= 8,
    // warpgroup MMA from shared memory: sm_90a's wgmma, Hopper only
    wgmma: a.ccMajor === 9 && a.ccMinor === 0,
    dot4: a.ccMajor * 10 + a.ccMinor >= 61,
  };
}

/** Hopper (H100 / H200) attributes. */
export const SM90_ATTRIBUTES: CudaAttributes = {
  ccMajor: 9,
  ccMinor: 0,
  warpSize: 32,
  maxThreadsPerBlock: 1024,
  maxGrid: [2 ** 31 - 1, 65535, 65535],
  maxSharedOptin: 227 * 1024,
  maxSharedPerBlock: 48 * 1024,
};
export const SM90_CAPS: Caps = capsFromAttributes(SM90_ATTRIBUTES);
