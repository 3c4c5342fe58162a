// HSA agents as the ROCm device sees them: the GPU agent (its ISA name, gfx target, wave size, limits), the
// CPU agent, and the three memory pools the device allocates from:
// - `device`: the GPU's coarse-grained global pool (VRAM) for weights, state and scratch buffers;
// - `host`: a CPU fine-grained global pool (system memory both sides see coherently) for slots, readback
//   buffers, the fault words and the staging ring;
// - `kernarg`: the CPU pool flagged KERNARG_INIT (fine-grained system memory) for kernarg segments.
import {
  type Hsa, HSA_AGENT_FEATURE_KERNEL_DISPATCH, HSA_AGENT_INFO_DEVICE, HSA_AGENT_INFO_FEATURE, HSA_AGENT_INFO_GRID_MAX_DIM,
  HSA_AGENT_INFO_PROFILE, HSA_AGENT_INFO_QUEUE_MAX_SIZE, HSA_AGENT_INFO_WAVEFRONT_SIZE, HSA_AGENT_INFO_WORKGROUP_MAX_SIZE,
  HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, HSA_AMD_AGENT_INFO_PRODUCT_NAME, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED,
  HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED, HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
  HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, HSA_AMD_MEMORY_POOL_INFO_SIZE,
  HSA_AMD_SEGMENT_GLOBAL, HSA_AMD_SEGMENT_GROUP, HSA_DEVICE_TYPE_CPU, HSA_DEVICE_TYPE_GPU,
} from "../../ffi/hsa.ts";
import type { Caps } from "../../kernels/target.ts";

/** The gfx targets the amdgpu renderer compiles for (issue 19): CDNA2, CDNA3 (wave64) and RDNA3 (wave32). */
export const ROCM_TARGETS = ["gfx90a", "gfx942", "gfx1100"] as const;

export interface RocmAgent {
  gpu: bigint;
  cpu: bigint;
  /** HSA_AGENT_INFO_NAME, e.g. "gfx942". */
  name: string;
  /** The full ISA name, e.g. "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-". */
  isa: string;
  /** The gfx target without feature flags, e.g. "gfx942". */
  gfx: string;
  /** Marketing name ("AMD Instinct MI300X"), or the gfx name when the runtime has none. */
  product: string;
  computeUnits: number;
  queueMaxSize: number;
  /** HSA_PROFILE_BASE (discrete GPUs) or HSA_PROFILE_FULL (APUs): executables must be created for it. */
  profile: number;
  pools: { device: bigint; host: bigint; kernarg: bigint };
  deviceBytes: number;
  caps: Caps;
}

/** The gfx target of an ISA name: "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" -> "gfx90a". */
export function gfxOf(isa: string): string {
  const m = /(gfx[0-9a-f]+)/.exec(isa);
  return m ? m[1] : isa;
}

/** Agent limits the kernel library reads, for a target with `wave`-wide wavefronts. */
export function rocmCaps(a: { wave: number; maxWorkgroupSize: number; gridMax: number[]; ldsBytes: number }): Caps {
  // AQL grid sizes count work-items in u32: a dimension holds at most 2^32-1 items over the largest workgroup.
  const perDim = a.gridMax.map((g) => Math.max(1, Math.floor(Math.min(g, 2 ** 32 - 1) / a.maxWorkgroupSize))) as [number, number, number];
  return {
    subgroups: true,
    subgroupSize: a.wave,
    f16: true,
    storage16: true,
    storage8: true,
    trap: true,
    maxWorkgroupSize: a.maxWorkgroupSize,
    maxWorkgroupsPerDim: perDim,
    maxSharedBytes: a.ldsBytes,
    maxBindingBytes: 2 ** 32,
    bindingAlign: 16,
    dispatchGap: false,
    mma: false,
  };
}

/** Each GPU agent able to take kernel dispatches, in the runtime's order. */
export function gpuAgents(hsa: Hsa): bigint[] {
  return hsa.agents().filter((a) =>
    hsa.agentInfoU32(a, HSA_AGENT_INFO_DEVICE) === HSA_DEVICE_TYPE_GPU &&
    (hsa.agentInfoU32(a, HSA_AGENT_INFO_FEATURE) & HSA_AGENT_FEATURE_KERNEL_DISPATCH) !== 0
  );
}

function pools(hsa: Hsa, agent: bigint): { pool: bigint; segment: number; flags: number; size: number; alloc: boolean }[] {
  return hsa.memoryPools(agent).map((pool) => ({
    pool,
    segment: hsa.memoryPoolInfoU32(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT),
    flags: hsa.memoryPoolInfoU32(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS),
    size: Number(hsa.memoryPoolInfoU64(pool, HSA_AMD_MEMORY_POOL_INFO_SIZE)),
    alloc: hsa.memoryPoolInfoU32(pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED) !== 0,
  }));
}

/** Describes GPU agent `gpu` (and picks its pools); a string says what it lacks. */
export function describeAgent(hsa: Hsa, gpu: bigint): RocmAgent | string {
  const name = hsa.agentName(gpu);
  const isas = hsa.isas(gpu);
  const isa = isas.length ? hsa.isaName(isas[0]) : `amdgcn-amd-amdhsa--${name}`;
  const cpu = hsa.agents().find((a) => hsa.agentInfoU32(a, HSA_AGENT_INFO_DEVICE) === HSA_DEVICE_TYPE_CPU);
  if (cpu === undefined) return `${name}: no CPU agent for host memory`;
  const gp = pools(hsa, gpu), cp = pools(hsa, cpu);
  const global = (p: { segment: number; alloc: boolean }) => p.segment === HSA_AMD_SEGMENT_GLOBAL && p.alloc;
  const device = gp.find((p) => global(p) && (p.flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED) !== 0);
  const host = cp.find((p) => global(p) && (p.flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED) !== 0);
  const kernarg = cp.find((p) => global(p) && (p.flags & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT) !== 0) ?? host;
  if (!device) return `${name}: no coarse-grained device memory pool`;
  if (!host || !kernarg) return `${name}: no fine-grained host memory pool`;
  const lds = gp.find((p) => p.segment === HSA_AMD_SEGMENT_GROUP)?.size || 64 << 10;
  const dims = hsa.agentInfo(gpu, HSA_AGENT_INFO_GRID_MAX_DIM, 12);
  const gridMax = [0, 1, 2].map((i) => new DataView(dims.buffer, dims.byteOffset).getUint32(4 * i, true));
  const wave = hsa.agentInfoU32(gpu, HSA_AGENT_INFO_WAVEFRONT_SIZE);
  let product = name;
  try {
    product = hsa.agentName(gpu, HSA_AMD_AGENT_INFO_PRODUCT_NAME) || name;
  } catch {
    // An older runtime without the AMD product name: the gfx name serves.
  }
  return {
    gpu, cpu, name, isa, gfx: gfxOf(isa), product,
    computeUnits: hsa.agentInfoU32(gpu, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT),
    queueMaxSize: hsa.agentInfoU32(gpu, HSA_AGENT_INFO_QUEUE_MAX_SIZE),
    profile: hsa.agentInfoU32(gpu, HSA_AGENT_INFO_PROFILE),
    pools: { device: device.pool, host: host.pool, kernarg: kernarg.pool },
    deviceBytes: device.size,
    caps: rocmCaps({ wave, maxWorkgroupSize: hsa.agentInfoU32(gpu, HSA_AGENT_INFO_WORKGROUP_MAX_SIZE), gridMax, ldsBytes: lds }),
  };
}
