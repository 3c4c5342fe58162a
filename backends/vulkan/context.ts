// Opening Vulkan for compute: the loader, an instance, the physical device (refused without robust buffer
// access), a logical device with the features kernels can use enabled, one compute queue, and what the
// device can do as a TargetSet.
import { pack } from "../../ffi/layout.ts";
import { mappedLibraries, pinLibrariesSince } from "../../ffi/lib.ts";
import { env } from "node:process";
import * as vk from "../../ffi/vulkan.ts";
import type { Caps, TargetSet } from "../../kernels/target.ts";
import { Unsupported } from "../errors.ts";

export interface VulkanOptions {
  /** Physical device index in the loader's order (default: the first discrete GPU, else the first usable). */
  deviceIndex?: number;
  /** Work units (step work.bytes) one submission may carry; a recording past it is cut (TargetSet.watchdogBudget). 0 = none. */
  watchdogBudget?: number;
  /** Bound on the device's own waits (staged transfers, destroy) in ms; default 600 000. */
  timeoutMs?: number;
  /** Loader names to try (default libvulkan.so.1, libvulkan.so). */
  library?: string | readonly string[];
  /** Force the renderer's u32-word storage path even where 16/8-bit storage exists (tests both paths). */
  noStorage16?: boolean;
  noStorage8?: boolean;
  /** Report no f16 arithmetic (kernels then decode f16 with integer ops and cannot compute in f16, nor use f16 coop). */
  noFloat16?: boolean;
  /**
   * Leave integer dot products off (caps.dot4Native and caps.dot4 false): the renderer decomposes BinOp dot4 into
   * byte products and the decode gemv defaults to its float path (tests both renderings on one driver).
   */
  noDot4?: boolean;
  /** Leave cooperative matrices off (caps.coop absent): the kernels take their paths without them (A/B runs). */
  noCoop?: boolean;
  /** Never map `device` buffers, even where device memory is host-visible (exercises the staged path of a discrete GPU). */
  stageDeviceMemory?: boolean;
  /** Write a timestamp around every step of a recording (stepTimes); refused where the queue has none. */
  timestamps?: boolean;
  /** A full memory barrier before every step of a recording, not only where one step's bytes meet another's. */
  allBarriers?: boolean;
  /**
   * Milliseconds a wait polls its fence before blocking in vkWaitForFences (default 20 on a GPU; 0, blocking at once,
   * on a CPU device, whose driver threads need the core a polling wait would take).
   */
  spinMs?: number;
  /** Unroll the loops PTX unrolls before rendering SPIR-V (default true; false leaves the Unroll hint only). */
  unroll?: boolean;
  /**
   * Benchmarks only (bench/kernels.ts variant vulkan:no-robust): create the device without robustBufferAccess, to
   * measure what its bounds checks cost the kernels. Unsafe: a failing check's loads and stores are then
   * undefined behaviour, so nothing but a timing run may set it.
   */
  unsafeNoRobustAccess?: boolean;
  /**
   * Render read-only bindings Restrict (kernels/render/spirv.ts SpirvOptions.restrictReads; default false): for
   * timing runs only, until recordings check that no written binding of a dispatch overlaps a read-only one.
   * The H200 measured nothing for it (session 8: qwen2.5-0.5b step 0.879 against 0.877 ms; the 1B 1.022 both),
   * nor for unsafeNoRobustAccess (0.883 and 1.031).
   */
  restrictReads?: boolean;
  /**
   * The queue family: "compute" (default) a compute family without graphics where the device has one (NVIDIA's
   * asynchronous compute queues; llama.cpp's Vulkan backend prefers them too), else the first with compute; "any"
   * the first with compute (the environment variable POOT_VULKAN_QUEUE=any asks for it). H200 (session 20,
   * `bench/kernels.ts --wall --pos 64 --backend vulkan:any-queue,vulkan`, two pairs): whole step qwen2.5-0.5b 0.787 /
   * 0.790 -> 0.776 / 0.776 ms, the 1B 0.954 / 0.954 -> 0.942 / 0.942; `bench/gap.ts --floor`: a dependent dispatch
   * 2.03 -> 1.92 µs, an independent one 0.94 -> 0.23.
   */
  queue?: "compute" | "any";
}

/** The queue family a device's work goes to (VulkanOptions.queue). */
export function queueFamily(families: { queueFlags: number }[], want: "compute" | "any"): number {
  const compute = (f: { queueFlags: number }) => (f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT) !== 0;
  const alone = families.findIndex((f) => compute(f) && !(f.queueFlags & vk.VK_QUEUE_GRAPHICS_BIT));
  return want === "compute" && alone >= 0 ? alone : families.findIndex(compute);
}

/** Features the logical device was created with. */
export interface Enabled {
  storage16: boolean;
  storage8: boolean;
  float16: boolean;
  subgroups: boolean;
  /** shaderIntegerDotProduct (OpSDot in shaders: Vulkan 1.3 or VK_KHR_shader_integer_dot_product). */
  dotProduct: boolean;
  /**
   * Cooperative matrices with the Vulkan memory model (and bf16 ones with VK_KHR_shader_bfloat16) enabled: the
   * same value as caps.coop, undefined where they are off.
   */
  coop: Caps["coop"];
  /** REQUIRE_FULL_SUBGROUPS may be set on pipelines (computeFullSubgroups). */
  fullSubgroups: boolean;
  maxSubgroupSize: number;
  maxWorkgroupDims: [number, number, number];
  nonCoherentAtomSize: number;
  /** Storage-buffer descriptors one shader may use. */
  maxStorageBuffers: number;
  /** Timestamps on the compute queue: ns per tick and valid bits (undefined: not asked for). */
  timestamps: { nsPerTick: number; validBits: number } | undefined;
  /** Subgroup operations the device supports in compute (VkSubgroupFeatureFlags) and its size range. */
  subgroupOps: number;
  subgroupSizes: [number, number];
}

export interface Context {
  api: vk.Vulkan;
  instance: bigint;
  pd: bigint;
  device: bigint;
  queue: bigint;
  family: number;
  target: TargetSet;
  enabled: Enabled;
  memory: ReturnType<vk.Vulkan["memoryProperties"]>;
  /** VK_EXT_memory_budget is supported (per-heap budget and usage can be queried). */
  memoryBudget: boolean;
  /** The device is a CPU (lavapipe, SwiftShader): its work runs on the host's own cores. */
  cpu: boolean;
}

const DEVICE_RANK: Record<number, number> = {
  [vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU]: 0,
  [vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU]: 1,
  [vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU]: 2,
  [vk.VK_PHYSICAL_DEVICE_TYPE_CPU]: 3,
  [vk.VK_PHYSICAL_DEVICE_TYPE_OTHER]: 4,
};
const NEEDED_SUBGROUP_OPS = vk.VK_SUBGROUP_FEATURE_BASIC_BIT | vk.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT |
  vk.VK_SUBGROUP_FEATURE_SHUFFLE_BIT | vk.VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT;

/**
 * Opens the loader, picks a device and creates it. Throws LibraryNotFound (no loader) or Unsupported.
 * `api` replaces the loader (tests give a fake one to see refusals no real driver here would cause).
 */
export function openContext(opts: VulkanOptions = {}, api: vk.Vulkan = vk.openVulkan(opts.library)): Context {
  let instance = 0n;
  const before = mappedLibraries();
  try {
    const loaderVersion = api.instanceVersion();
    instance = api.createInstance({
      appName: "poot",
      apiVersion: loaderVersion >= vk.VK_API_VERSION_1_3 ? vk.VK_API_VERSION_1_3 : vk.VK_API_VERSION_1_1,
    });
    // The drivers the loader opened stay loaded, even when this open fails and destroys its instance (ffi/lib.ts).
    pinLibrariesSince(before);
    const pds = api.physicalDevices(instance);
    const usable = pds.map((pd, index) => ({ pd, index, props: api.physicalDeviceProperties(pd) }))
      .filter((d) => d.props.apiVersion >= vk.VK_API_VERSION_1_1)
      .filter((d) => api.queueFamilies(d.pd).some((f) => f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT));
    let pick = opts.deviceIndex !== undefined ? usable.find((d) => d.index === opts.deviceIndex) : undefined;
    if (opts.deviceIndex !== undefined && !pick) {
      throw new Unsupported(`vulkan: no usable device ${opts.deviceIndex} (${pds.length} devices, Vulkan 1.1 and a compute queue needed)`);
    }
    pick ??= usable.slice().sort((a, b) => (DEVICE_RANK[a.props.deviceType] ?? 5) - (DEVICE_RANK[b.props.deviceType] ?? 5))[0];
    if (!pick) throw new Unsupported(`vulkan: no device with Vulkan 1.1 and a compute queue (${pds.length} found)`);
    return createDevice(api, instance, pick.pd, pick.props, opts);
  } catch (e) {
    if (instance) api.destroyInstance(instance);
    api.close();
    throw e;
  }
}

function createDevice(
  api: vk.Vulkan,
  instance: bigint,
  pd: bigint,
  props: ReturnType<vk.Vulkan["physicalDeviceProperties"]>,
  opts: VulkanOptions,
): Context {
  const name = props.deviceName;
  const api12 = props.apiVersion >= vk.VK_API_VERSION_1_2;
  const api13 = props.apiVersion >= vk.VK_API_VERSION_1_3;
  const exts = new Set(api.deviceExtensions(pd));
  const [f2, s16, s8, f16, sgc] = api.physicalDeviceFeatures2(pd, [
    vk.VkPhysicalDevice16BitStorageFeatures,
    vk.VkPhysicalDevice8BitStorageFeatures,
    vk.VkPhysicalDeviceShaderFloat16Int8Features,
    vk.VkPhysicalDeviceSubgroupSizeControlFeatures,
  ]);
  // Out-of-range accesses must stay harmless: a failing check keeps running (there is no trap) and its
  // loads/stores may go anywhere.
  if (!f2.features.robustBufferAccess) throw new Unsupported(`vulkan: ${name} lacks robustBufferAccess; refusing it`);
  const [, sub, sgp] = api.physicalDeviceProperties2(pd, [
    vk.VkPhysicalDeviceSubgroupProperties,
    vk.VkPhysicalDeviceSubgroupSizeControlProperties,
  ]);

  const extensions: string[] = [];
  const feature = (have: number, ext: string | undefined): boolean => {
    if (!have) return false;
    if (!ext) return true;
    if (!exts.has(ext)) return false;
    extensions.push(ext);
    return true;
  };
  const storage16 = feature(s16.storageBuffer16BitAccess, undefined); // core since 1.1
  const storage8 = feature(s8.storageBuffer8BitAccess, api12 ? undefined : "VK_KHR_8bit_storage");
  const float16 = feature(f16.shaderFloat16, api12 ? undefined : "VK_KHR_shader_float16_int8");
  const fullSubgroups = feature(sgc.computeFullSubgroups, api13 ? undefined : "VK_EXT_subgroup_size_control");
  const dot = opts.noDot4 ? undefined : integerDot(api, pd, api13, exts);
  const dotProduct = feature(dot?.shaderIntegerDotProduct ?? 0, api13 ? undefined : "VK_KHR_shader_integer_dot_product");
  const subgroups = (sub.supportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT) !== 0 &&
    (sub.supportedOperations & NEEDED_SUBGROUP_OPS) === NEEDED_SUBGROUP_OPS;
  // The coop kernels split a tile over full subgroups of 32 or 64 lanes; f16 matrices are f16 arithmetic.
  const coopOk = !opts.noCoop && subgroups && (sub.subgroupSize === 32 || sub.subgroupSize === 64);
  const coop = coopOk ? cooperativeMatrix(api, instance, pd, exts, api12, float16 && !opts.noFloat16) : undefined;
  if (coop) extensions.push(...coopExtensions(coop, api12));

  const chain: Uint8Array[] = [pack(vk.VkPhysicalDeviceFeatures2, { features: { robustBufferAccess: opts.unsafeNoRobustAccess ? 0 : 1 } })];
  if (storage16) chain.push(pack(vk.VkPhysicalDevice16BitStorageFeatures, { storageBuffer16BitAccess: 1 }));
  if (storage8) chain.push(pack(vk.VkPhysicalDevice8BitStorageFeatures, { storageBuffer8BitAccess: 1 }));
  if (float16) chain.push(pack(vk.VkPhysicalDeviceShaderFloat16Int8Features, { shaderFloat16: 1 }));
  if (fullSubgroups) chain.push(pack(vk.VkPhysicalDeviceSubgroupSizeControlFeatures, { computeFullSubgroups: 1 }));
  if (dotProduct) chain.push(pack(vk.VkPhysicalDeviceShaderIntegerDotProductFeatures, { shaderIntegerDotProduct: 1 }));
  if (coop) chain.push(...coopFeatures(coop));
  const family = queueFamily(api.queueFamilies(pd), opts.queue ?? (env.POOT_VULKAN_QUEUE === "any" ? "any" : "compute"));
  const device = api.createDevice(pd, { queues: [{ family }], extensions, pNext: vk.linkChain(...chain) });
  const queue = api.deviceQueue(device, family);

  const memory = api.memoryProperties(pd);
  const lim = props.limits;
  let total = 0;
  for (let h = 0; h < memory.memoryHeapCount; h++) {
    if (memory.memoryHeaps[h].flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) total += Number(memory.memoryHeaps[h].size);
  }
  if (!total) for (let h = 0; h < memory.memoryHeapCount; h++) total += Number(memory.memoryHeaps[h].size);

  const caps: Caps = {
    subgroups,
    subgroupSize: subgroups ? sub.subgroupSize : 0,
    f16: float16 && !opts.noFloat16,
    storage16: storage16 && !opts.noStorage16,
    storage8: storage8 && !opts.noStorage8,
    trap: false,
    maxWorkgroupSize: lim.maxComputeWorkGroupInvocations,
    maxWorkgroupsPerDim: lim.maxComputeWorkGroupCount as [number, number, number],
    maxSharedBytes: lim.maxComputeSharedMemorySize,
    maxBindingBytes: lim.maxStorageBufferRange,
    maxStorageBuffers: lim.maxPerStageDescriptorStorageBuffers,
    // 16 at least: uvec4 views of a binding must start on a 16-byte boundary
    bindingAlign: Math.max(16, Number(lim.minStorageBufferOffsetAlignment)),
    // a barrier between dependent dispatches drains the queue: 3-7 µs each on the H200 (README)
    dispatchGap: true,
    dot4Native: dotProduct,
    // The integer gemv only where the driver says its packed signed dot beats the arithmetic written out
    // (NVIDIA: dp4a); lavapipe offers the instruction but not accelerated, so it keeps the float default.
    dot4: dotProduct && dot!.accelerated,
    ...(coop ? { coop } : {}),
  };
  const target: TargetSet = {
    backend: "vulkan",
    device: name,
    caps,
    memory: { totalBytes: total },
    watchdogBudget: opts.watchdogBudget ?? 0,
  };
  let timestamps: Enabled["timestamps"];
  if (opts.timestamps) {
    const validBits = api.queueFamilies(pd)[family].timestampValidBits;
    if (!validBits || !lim.timestampPeriod) {
      api.destroyDevice(device);
      throw new Unsupported(`vulkan: ${name}: the compute queue writes no timestamps (timestampValidBits ${validBits})`);
    }
    timestamps = { nsPerTick: lim.timestampPeriod, validBits };
  }
  const enabled: Enabled = {
    storage16, storage8, float16, subgroups, dotProduct, fullSubgroups, coop,
    maxSubgroupSize: Math.max(sub.subgroupSize, fullSubgroups ? sgp.maxSubgroupSize : 0),
    maxWorkgroupDims: lim.maxComputeWorkGroupSize as [number, number, number],
    nonCoherentAtomSize: Number(lim.nonCoherentAtomSize),
    maxStorageBuffers: lim.maxPerStageDescriptorStorageBuffers,
    timestamps,
    subgroupOps: sub.supportedOperations,
    subgroupSizes: [sgp.minSubgroupSize || sub.subgroupSize, sgp.maxSubgroupSize || sub.subgroupSize],
  };
  return {
    api, instance, pd, device, queue, family, target, enabled, memory, memoryBudget: exts.has("VK_EXT_memory_budget"),
    cpu: props.deviceType === vk.VK_PHYSICAL_DEVICE_TYPE_CPU,
  };
}

/**
 * The integer dot product feature and whether the 4x8 packed signed dot is accelerated, where the device can be
 * asked (Vulkan 1.3, or the KHR extension); undefined where it cannot.
 */
function integerDot(api: vk.Vulkan, pd: bigint, api13: boolean, exts: Set<string>): { shaderIntegerDotProduct: number; accelerated: boolean } | undefined {
  if (!api13 && !exts.has("VK_KHR_shader_integer_dot_product")) return undefined;
  const [, f] = api.physicalDeviceFeatures2(pd, [vk.VkPhysicalDeviceShaderIntegerDotProductFeatures]);
  const [, p] = api.physicalDeviceProperties2(pd, [vk.VkPhysicalDeviceShaderIntegerDotProductProperties]);
  return { shaderIntegerDotProduct: f.shaderIntegerDotProduct, accelerated: p.integerDotProduct4x8BitPackedSignedAccelerated !== 0 };
}

const COOP_EXT = "VK_KHR_cooperative_matrix";
const MEMORY_MODEL_EXT = "VK_KHR_vulkan_memory_model";
const BF16_EXT = "VK_KHR_shader_bfloat16";

/**
 * The cooperative matrices the kernels can use (caps.coop): VK_KHR_cooperative_matrix with a subgroup-scope
 * 16x16x16 f32-accumulating shape for f16 inputs (where `f16` arithmetic is on) and/or bf16 ones (with
 * VK_KHR_shader_bfloat16's types in cooperative matrices), and the Vulkan memory model at device scope, which
 * the extension's shaders declare. Undefined where neither input type qualifies.
 */
function cooperativeMatrix(
  api: vk.Vulkan,
  instance: bigint,
  pd: bigint,
  exts: Set<string>,
  api12: boolean,
  f16: boolean,
): Caps["coop"] {
  // a struct goes into a feature query only where the device knows it
  if (!exts.has(COOP_EXT) || !(api12 || exts.has(MEMORY_MODEL_EXT))) return undefined;
  const [, cm, model] = api.physicalDeviceFeatures2(pd, [vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR, vk.VkPhysicalDeviceVulkanMemoryModelFeatures]);
  if (!cm.cooperativeMatrix || !model.vulkanMemoryModel || !model.vulkanMemoryModelDeviceScope) return undefined;
  const shapes = api.cooperativeMatrixProperties(instance, pd);
  const has = (input: number) => shapes.some((s) => isTile16(s, input));
  const coop = {
    bf16: has(vk.VK_COMPONENT_TYPE_BFLOAT16_KHR) && bf16Matrices(api, pd, exts),
    f16: f16 && has(vk.VK_COMPONENT_TYPE_FLOAT16_KHR),
  };
  return coop.bf16 || coop.f16 ? coop : undefined;
}

/** A subgroup-scope 16x16x16 shape taking `input` for A and B and accumulating in f32, without saturation. */
function isTile16(s: ReturnType<vk.Vulkan["cooperativeMatrixProperties"]>[number], input: number): boolean {
  const F32 = vk.VK_COMPONENT_TYPE_FLOAT32_KHR;
  return s.scope === vk.VK_SCOPE_SUBGROUP_KHR && s.MSize === 16 && s.NSize === 16 && s.KSize === 16 &&
    s.AType === input && s.BType === input && s.CType === F32 && s.ResultType === F32 && !s.saturatingAccumulation;
}

/** VK_KHR_shader_bfloat16 with bf16 types allowed in shaders and in cooperative matrices. */
function bf16Matrices(api: vk.Vulkan, pd: bigint, exts: Set<string>): boolean {
  if (!exts.has(BF16_EXT)) return false;
  const [, b] = api.physicalDeviceFeatures2(pd, [vk.VkPhysicalDeviceShaderBfloat16FeaturesKHR]);
  return !!b.shaderBFloat16Type && !!b.shaderBFloat16CooperativeMatrix;
}

/** The device extensions cooperativeMatrix's answer needs enabled. */
function coopExtensions(coop: NonNullable<Caps["coop"]>, api12: boolean): string[] {
  return [COOP_EXT, ...(api12 ? [] : [MEMORY_MODEL_EXT]), ...(coop.bf16 ? [BF16_EXT] : [])];
}

/** The feature structs cooperativeMatrix's answer needs in the device-create chain. */
function coopFeatures(coop: NonNullable<Caps["coop"]>): Uint8Array[] {
  const chain = [
    pack(vk.VkPhysicalDeviceCooperativeMatrixFeaturesKHR, { cooperativeMatrix: 1 }),
    pack(vk.VkPhysicalDeviceVulkanMemoryModelFeatures, { vulkanMemoryModel: 1, vulkanMemoryModelDeviceScope: 1 }),
  ];
  if (coop.bf16) chain.push(pack(vk.VkPhysicalDeviceShaderBfloat16FeaturesKHR, { shaderBFloat16Type: 1, shaderBFloat16CooperativeMatrix: 1 }));
  return chain;
}

/**
 * Picks a memory type for a buffer: `device` prefers device-local memory; `upload` and `readback` need
 * host-visible coherent memory (upload prefers it device-local too, readback prefers it cached).
 * Returns the type index and whether it is host-visible and coherent (so it can be mapped and memcpy'd).
 */
export function memoryType(ctx: Context, typeBits: number, usage: "device" | "upload" | "readback"): { index: number; mappable: boolean } {
  const { memoryTypes, memoryTypeCount } = ctx.memory;
  const HV = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const DL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  const CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT;
  const prefs: [number, number][] = usage === "device"
    ? [[DL, 0]]
    : usage === "upload"
    ? [[HV | DL, 0], [HV, 0]]
    : [[HV | CACHED, 0], [HV, 0]];
  for (const [want] of prefs) {
    for (let i = 0; i < memoryTypeCount; i++) {
      if (!(typeBits & (1 << i))) continue;
      const f = memoryTypes[i].propertyFlags;
      if ((f & want) === want) return { index: i, mappable: (f & HV) === HV };
    }
  }
  for (let i = 0; i < memoryTypeCount; i++) {
    if (typeBits & (1 << i)) return { index: i, mappable: (memoryTypes[i].propertyFlags & HV) === HV };
  }
  throw new Unsupported("vulkan: no memory type fits the buffer");
}
