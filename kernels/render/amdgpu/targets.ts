// The AMDGPU processors the renderer targets, as data: wave size, LDS, what comgr is asked to build. A new
// processor is one entry here.
import type { Caps } from "../../target.ts";

export interface AmdTarget {
  /** The processor name ("gfx90a"), as HSA's agent ISA names it (amdgcn-amd-amdhsa--gfx90a...). */
  name: string;
  /** Lanes per wave the kernels are compiled for. */
  wave: 32 | 64;
  /** LDS bytes a workgroup may allocate. */
  ldsBytes: number;
  /**
   * A processor of the same ISA generation that an older LLVM (the comgr 2.4 of CI links LLVM 15) compiles
   * when it does not know `name` yet: the code is then built for `standIn` (never loadable on `name`'s
   * device, only a compile check); a ROCm that knows `name` builds it natively.
   */
  standIn?: string;
  /** What the device is. */
  device: string;
}

export const AMD_TARGETS = {
  gfx90a: { name: "gfx90a", wave: 64, ldsBytes: 64 * 1024, device: "AMD Instinct MI200 (CDNA2)" },
  gfx942: { name: "gfx942", wave: 64, ldsBytes: 64 * 1024, standIn: "gfx940", device: "AMD Instinct MI300 (CDNA3)" },
  gfx1100: { name: "gfx1100", wave: 32, ldsBytes: 64 * 1024, device: "AMD Radeon RX 7900 (RDNA3)" },
} satisfies Record<string, AmdTarget>;
export type AmdTargetName = keyof typeof AMD_TARGETS;
export const AMD_TARGET_NAMES = Object.keys(AMD_TARGETS) as AmdTargetName[];

/** The target of a processor name as HSA reports it ("gfx942:sramecc+:xnack-" -> gfx942), or undefined. */
export function amdTarget(processor: string): AmdTarget | undefined {
  const base = processor.replace(/^amdgcn-amd-amdhsa--/, "").split(":")[0];
  return (AMD_TARGETS as Record<string, AmdTarget>)[base];
}

/** What kernels may use on `t`: waves as subgroups, f16, 8/16-bit storage, trapping checks; no MMA (MFMA/WMMA). */
export function amdCaps(t: AmdTarget): Caps {
  return {
    subgroups: true,
    subgroupSize: t.wave,
    f16: true,
    storage16: true,
    storage8: true,
    trap: true,
    maxWorkgroupSize: 1024,
    // An AQL packet's grid size is a u32 count of work-items per dimension: 2^22 workgroups of up to 1024 fit.
    maxWorkgroupsPerDim: [2 ** 22 - 1, 65535, 65535],
    maxSharedBytes: t.ldsBytes,
    maxBindingBytes: 2 ** 31,
    bindingAlign: 256,
    // AQL packets' barrier bits chain dispatches on the device: no fused tails (not measured as a gap).
    dispatchGap: false,
    mma: false,
  };
}
