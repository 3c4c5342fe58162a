// libvulkan: the compute subset of Vulkan 1.0-1.3 as a symbol table (exported by the loader, so no
// vkGet*ProcAddr dance but for one extension query, cooperativeMatrixProperties), and thin wrappers that pack
// create-infos, read out-params and turn a negative VkResult into VkError {fn, result}. Handles are bigint
// (dispatchable ones are pointers, the rest uint64_t).

import { type Bound, cstr, dlopen, fnFromPointer, keepAlive, type Library, type Pointer, ptrArray, ptrOf } from "./lib.ts";
import { type Decoded, decode, decodeArray, type DecodedRecordOf, type Fields, type Init, pack, packArray, type Struct } from "./layout.ts";
import * as S from "./vulkan_structs.ts";
import { vulkanSymbols } from "./vulkan_symbols.ts";
import {
  VK_COMMAND_BUFFER_LEVEL_PRIMARY,
  VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
  VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
  VK_FENCE_CREATE_SIGNALED_BIT,
  VK_PIPELINE_BIND_POINT_COMPUTE,
  VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
  VK_QUERY_RESULT_64_BIT,
  VK_QUERY_RESULT_WAIT_BIT,
  VK_SEMAPHORE_TYPE_TIMELINE,
  VK_SEMAPHORE_WAIT_ANY_BIT,
  VK_SHADER_STAGE_COMPUTE_BIT,
  VK_TIMEOUT,
  VK_NOT_READY,
  VK_WHOLE_SIZE,
  VK_API_VERSION_1_2,
  vkResultName,
  VK_ACCESS_MEMORY_READ_BIT,
  VK_ACCESS_MEMORY_WRITE_BIT,
} from "./vulkan_consts.ts";

export * from "./vulkan_consts.ts";
export * from "./vulkan_structs.ts";
export { vulkanSymbols } from "./vulkan_symbols.ts";

/** A Vulkan call returned a negative VkResult. `result` is its name, e.g. "VK_ERROR_DEVICE_LOST". */
export class VkError extends Error {
  override name = "VkError";
  readonly result: string;
  constructor(readonly fn: string, readonly code: number) {
    super(`${fn} failed: ${vkResultName(code)} (${code})`);
    this.result = vkResultName(code);
  }
  /** Same as `result` (the name other driver errors use). */
  get codeName(): string {
    return this.result;
  }
}

export type VulkanSymbols = Bound<typeof vulkanSymbols>;

/** Loader names tried in order. */
export const VULKAN_LIBRARY: readonly string[] = ["libvulkan.so.1", "libvulkan.so"];

/** Opens the Vulkan loader (LibraryNotFound when absent). */
export function openVulkan(names: string | readonly string[] = VULKAN_LIBRARY): Vulkan {
  return new Vulkan(dlopen(names, vulkanSymbols));
}

type Handle = bigint;
type Chain = readonly Struct[];
type DecodedChain<C extends Chain> = { -readonly [K in keyof C]: DecodedRecordOf<C[K]> };

export interface DeviceOptions {
  /** One entry per queue family used; priorities default to [1] (one queue). */
  queues: readonly { family: number; priorities?: readonly number[] }[];
  extensions?: readonly string[];
  /** Core 1.0 features (pEnabledFeatures); leave out when a VkPhysicalDeviceFeatures2 is in pNext. */
  features?: Init<typeof S.VkPhysicalDeviceFeatures.fields>;
  /** Head of a packed pNext chain (see linkChain), e.g. VkPhysicalDeviceFeatures2 -> 16-bit storage -> ... */
  pNext?: Uint8Array;
}
export interface ComputePipelineOptions {
  layout: Handle;
  module: Handle;
  entry?: string;
  flags?: number;
  stageFlags?: number;
  /** Specialization constants: map entries and the bytes they index. */
  specialization?: { entries: readonly Init<typeof S.VkSpecializationMapEntry.fields>[]; data: Uint8Array };
  /** Pins the subgroup size (VK_EXT_subgroup_size_control / 1.3). */
  requiredSubgroupSize?: number;
  cache?: Handle;
}
export interface DescriptorWrite {
  set: Handle;
  binding: number;
  type?: number;
  arrayElement?: number;
  buffers: readonly { buffer: Handle; offset?: bigint | number; range?: bigint | number }[];
}
export interface SubmitDesc {
  commandBuffers: readonly Handle[];
  wait?: readonly { semaphore: Handle; stage?: number; value?: bigint }[];
  signal?: readonly { semaphore: Handle; value?: bigint }[];
}
/** Submit infos packed once and resubmitted verbatim (the per-token replay path). */
export interface PackedSubmits {
  readonly bytes: Uint8Array;
  readonly count: number;
}

/**
 * Sets each packed struct's pNext (offset 8 in every Vulkan struct) to the next one and returns the head;
 * the tail stays alive as long as the head does.
 */
export function linkChain(...structs: Uint8Array[]): Uint8Array {
  for (let i = 0; i + 1 < structs.length; i++) {
    new DataView(structs[i].buffer, structs[i].byteOffset).setBigUint64(8, ptrOf(structs[i + 1]), true);
  }
  if (structs.length > 1) keepAlive(structs[0], ...structs.slice(1));
  return structs[0];
}

function handles(xs: readonly Handle[] | BigUint64Array): BigUint64Array {
  if (xs instanceof BigUint64Array) return xs;
  const out = new BigUint64Array(new ArrayBuffer(Math.max(xs.length, 1) * 8));
  out.set(xs);
  return out;
}

/** The Vulkan loader's functions (`fn`, raw) and thin checked wrappers. */
export class Vulkan {
  readonly fn: VulkanSymbols;
  // Out-param scratch reused by every wrapper: calls are synchronous, so one of each suffices.
  readonly #u64 = new BigUint64Array(new ArrayBuffer(8));
  readonly #u32 = new Uint32Array(new ArrayBuffer(4));

  constructor(readonly lib: Library<typeof vulkanSymbols>) {
    this.fn = lib.symbols;
  }
  close(): void {
    this.lib.close();
  }
  /** Throws VkError for a negative result; returns non-negative ones (VK_TIMEOUT, VK_NOT_READY ...). */
  check(fn: string, result: number): number {
    if (result < 0) throw new VkError(fn, result);
    return result;
  }
  #handle(fn: string, result: number): Handle {
    this.check(fn, result);
    return this.#u64[0];
  }
  #create(fn: "vkCreateBuffer" | "vkCreateShaderModule" | "vkCreateDescriptorSetLayout" | "vkCreateDescriptorPool" | "vkCreatePipelineLayout" | "vkCreateCommandPool" | "vkCreateFence" | "vkCreateSemaphore" | "vkCreateQueryPool" | "vkAllocateMemory", device: Handle, info: Uint8Array): Handle {
    return this.#handle(fn, this.fn[fn](device, info, 0n, this.#u64));
  }
  #enumerate<F extends Fields>(
    fn: string,
    call: (count: Uint32Array, out: Uint8Array | null) => number,
    s: Struct<F>,
  ): Decoded<F>[] {
    const count = new Uint32Array(1);
    this.check(fn, call(count, null));
    // each element over the struct's defaults: an output struct with an sType must carry it into the call
    const out = packArray(s, new Array<Init<F>>(count[0]).fill({}));
    this.check(fn, call(count, out));
    return decodeArray(s, out, count[0]);
  }

  // --- instance and physical devices ---------------------------------------------------------------------
  /** The loader's instance version (VK_API_VERSION_1_0 for a 1.0 loader). */
  instanceVersion(): number {
    const f = this.fn.vkEnumerateInstanceVersion;
    if (!f) return (1 << 22);
    this.check("vkEnumerateInstanceVersion", f(this.#u32));
    return this.#u32[0];
  }
  instanceExtensions(): string[] {
    return this.#enumerate("vkEnumerateInstanceExtensionProperties", (n, out) => this.fn.vkEnumerateInstanceExtensionProperties(null, n, out), S.VkExtensionProperties).map((e) => e.extensionName);
  }
  createInstance(opts: { appName?: string; apiVersion?: number; extensions?: readonly string[]; layers?: readonly string[]; pNext?: Uint8Array } = {}): Handle {
    const app = pack(S.VkApplicationInfo, { pApplicationName: opts.appName ?? "poot", pEngineName: "poot", apiVersion: opts.apiVersion ?? VK_API_VERSION_1_2 });
    const ext = opts.extensions ?? [];
    const lay = opts.layers ?? [];
    const info = pack(S.VkInstanceCreateInfo, {
      pNext: opts.pNext ?? null,
      pApplicationInfo: app,
      enabledLayerCount: lay.length,
      ppEnabledLayerNames: lay.length ? ptrArray(lay) : null,
      enabledExtensionCount: ext.length,
      ppEnabledExtensionNames: ext.length ? ptrArray(ext) : null,
    });
    return this.#handle("vkCreateInstance", this.fn.vkCreateInstance(info, 0n, this.#u64));
  }
  destroyInstance(instance: Handle): void {
    this.fn.vkDestroyInstance(instance, 0n);
  }
  physicalDevices(instance: Handle): Handle[] {
    const n = new Uint32Array(1);
    this.check("vkEnumeratePhysicalDevices", this.fn.vkEnumeratePhysicalDevices(instance, n, null));
    const out = new BigUint64Array(Math.max(n[0], 1));
    this.check("vkEnumeratePhysicalDevices", this.fn.vkEnumeratePhysicalDevices(instance, n, out));
    return Array.from(out.subarray(0, n[0]));
  }
  physicalDeviceProperties(pd: Handle): Decoded<typeof S.VkPhysicalDeviceProperties.fields> {
    const out = pack(S.VkPhysicalDeviceProperties);
    this.fn.vkGetPhysicalDeviceProperties(pd, out);
    return decode(S.VkPhysicalDeviceProperties, out);
  }
  /** VkPhysicalDeviceProperties2 with `chain` (e.g. [VkPhysicalDeviceSubgroupProperties]) filled in. */
  physicalDeviceProperties2<const C extends Chain>(pd: Handle, chain: C): [Decoded<typeof S.VkPhysicalDeviceProperties2.fields>, ...DecodedChain<C>] {
    return this.#query2("vkGetPhysicalDeviceProperties2", S.VkPhysicalDeviceProperties2, pd, chain) as [Decoded<typeof S.VkPhysicalDeviceProperties2.fields>, ...DecodedChain<C>];
  }
  physicalDeviceFeatures(pd: Handle): Decoded<typeof S.VkPhysicalDeviceFeatures.fields> {
    const out = pack(S.VkPhysicalDeviceFeatures);
    this.fn.vkGetPhysicalDeviceFeatures(pd, out);
    return decode(S.VkPhysicalDeviceFeatures, out);
  }
  /** VkPhysicalDeviceFeatures2 with `chain` (16-bit storage, float16/int8, timeline, robustness2 ...) filled in. */
  physicalDeviceFeatures2<const C extends Chain>(pd: Handle, chain: C): [Decoded<typeof S.VkPhysicalDeviceFeatures2.fields>, ...DecodedChain<C>] {
    return this.#query2("vkGetPhysicalDeviceFeatures2", S.VkPhysicalDeviceFeatures2, pd, chain) as [Decoded<typeof S.VkPhysicalDeviceFeatures2.fields>, ...DecodedChain<C>];
  }
  #query2(fn: "vkGetPhysicalDeviceProperties2" | "vkGetPhysicalDeviceFeatures2" | "vkGetPhysicalDeviceMemoryProperties2", head: Struct, pd: Handle, chain: Chain): unknown[] {
    const f = this.fn[fn];
    if (!f) throw new VkError(fn, -7); // a 1.0 loader: VK_ERROR_EXTENSION_NOT_PRESENT
    const parts = [head, ...chain].map((s) => pack(s));
    linkChain(...parts);
    f(pd, parts[0]);
    return [head, ...chain].map((s, i) => decode(s, parts[i]));
  }
  memoryProperties(pd: Handle): Decoded<typeof S.VkPhysicalDeviceMemoryProperties.fields> {
    const out = pack(S.VkPhysicalDeviceMemoryProperties);
    this.fn.vkGetPhysicalDeviceMemoryProperties(pd, out);
    return decode(S.VkPhysicalDeviceMemoryProperties, out);
  }
  /** Memory properties with VK_EXT_memory_budget's per-heap budget/usage (the extension must be supported). */
  memoryBudget(pd: Handle): [Decoded<typeof S.VkPhysicalDeviceMemoryProperties2.fields>, Decoded<typeof S.VkPhysicalDeviceMemoryBudgetPropertiesEXT.fields>] {
    return this.#query2("vkGetPhysicalDeviceMemoryProperties2", S.VkPhysicalDeviceMemoryProperties2, pd, [S.VkPhysicalDeviceMemoryBudgetPropertiesEXT]) as [Decoded<typeof S.VkPhysicalDeviceMemoryProperties2.fields>, Decoded<typeof S.VkPhysicalDeviceMemoryBudgetPropertiesEXT.fields>];
  }
  queueFamilies(pd: Handle): Decoded<typeof S.VkQueueFamilyProperties.fields>[] {
    const n = new Uint32Array(1);
    this.fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, n, null);
    const out = new Uint8Array(new ArrayBuffer(Math.max(n[0], 1) * S.VkQueueFamilyProperties.size));
    this.fn.vkGetPhysicalDeviceQueueFamilyProperties(pd, n, out);
    return decodeArray(S.VkQueueFamilyProperties, out, n[0]);
  }
  deviceExtensions(pd: Handle): string[] {
    return this.#enumerate("vkEnumerateDeviceExtensionProperties", (n, out) => this.fn.vkEnumerateDeviceExtensionProperties(pd, null, n, out), S.VkExtensionProperties).map((e) => e.extensionName);
  }
  /**
   * The matrix shapes and types VK_KHR_cooperative_matrix runs on `pd` (ask only where the device lists the
   * extension); [] where the instance has no such entry point. An extension function the loader does not
   * export, so it comes through vkGetInstanceProcAddr.
   */
  cooperativeMatrixProperties(instance: Handle, pd: Handle): Decoded<typeof S.VkCooperativeMatrixPropertiesKHR.fields>[] {
    const name = "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR";
    const p = this.fn.vkGetInstanceProcAddr(instance, cstr(name));
    if (!p) return [];
    const f = fnFromPointer(p, { args: ["u64", "buffer", "buffer"], result: "i32" });
    return this.#enumerate(name, (n, out) => f(pd, n, out), S.VkCooperativeMatrixPropertiesKHR);
  }

  // --- logical device and queues -------------------------------------------------------------------------
  createDevice(pd: Handle, opts: DeviceOptions): Handle {
    const queues = packArray(S.VkDeviceQueueCreateInfo, opts.queues.map((q) => {
      const pr = q.priorities ?? [1];
      return { queueFamilyIndex: q.family, queueCount: pr.length, pQueuePriorities: new Float32Array(pr) };
    }));
    const ext = opts.extensions ?? [];
    const info = pack(S.VkDeviceCreateInfo, {
      pNext: opts.pNext ?? null,
      queueCreateInfoCount: opts.queues.length,
      pQueueCreateInfos: queues,
      enabledExtensionCount: ext.length,
      ppEnabledExtensionNames: ext.length ? ptrArray(ext) : null,
      pEnabledFeatures: opts.features ? pack(S.VkPhysicalDeviceFeatures, opts.features) : null,
    });
    return this.#handle("vkCreateDevice", this.fn.vkCreateDevice(pd, info, 0n, this.#u64));
  }
  destroyDevice(device: Handle): void {
    this.fn.vkDestroyDevice(device, 0n);
  }
  deviceQueue(device: Handle, family: number, index = 0): Handle {
    this.fn.vkGetDeviceQueue(device, family, index, this.#u64);
    return this.#u64[0];
  }
  deviceWaitIdle(device: Handle): void {
    this.check("vkDeviceWaitIdle", this.fn.vkDeviceWaitIdle(device));
  }
  queueWaitIdle(queue: Handle): void {
    this.check("vkQueueWaitIdle", this.fn.vkQueueWaitIdle(queue));
  }
  /** Packs submit infos (with a VkTimelineSemaphoreSubmitInfo when any value is given) for repeated submission. */
  packSubmits(submits: readonly SubmitDesc[]): PackedSubmits {
    const bytes = packArray(S.VkSubmitInfo, submits.map((s) => {
      const wait = s.wait ?? [];
      const signal = s.signal ?? [];
      const timeline = wait.some((w) => w.value !== undefined) || signal.some((x) => x.value !== undefined);
      return {
        pNext: timeline
          ? pack(S.VkTimelineSemaphoreSubmitInfo, {
            waitSemaphoreValueCount: wait.length,
            pWaitSemaphoreValues: wait.length ? handles(wait.map((w) => w.value ?? 0n)) : null,
            signalSemaphoreValueCount: signal.length,
            pSignalSemaphoreValues: signal.length ? handles(signal.map((x) => x.value ?? 0n)) : null,
          })
          : null,
        waitSemaphoreCount: wait.length,
        pWaitSemaphores: wait.length ? handles(wait.map((w) => w.semaphore)) : null,
        pWaitDstStageMask: wait.length ? new Uint32Array(wait.map((w) => w.stage ?? VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)) : null,
        commandBufferCount: s.commandBuffers.length,
        pCommandBuffers: handles(s.commandBuffers),
        signalSemaphoreCount: signal.length,
        pSignalSemaphores: signal.length ? handles(signal.map((x) => x.semaphore)) : null,
      };
    }));
    return { bytes, count: submits.length };
  }
  /** vkQueueSubmit; pass PackedSubmits on the hot path (no packing per call). */
  queueSubmit(queue: Handle, submits: PackedSubmits | readonly SubmitDesc[], fence: Handle = 0n): void {
    const p = "bytes" in submits ? submits : this.packSubmits(submits);
    this.check("vkQueueSubmit", this.fn.vkQueueSubmit(queue, p.count, p.bytes, fence));
  }

  // --- buffers and memory --------------------------------------------------------------------------------
  createBuffer(device: Handle, size: bigint | number, usage: number, pNext: Uint8Array | null = null): Handle {
    return this.#create("vkCreateBuffer", device, pack(S.VkBufferCreateInfo, { pNext, size, usage }));
  }
  destroyBuffer(device: Handle, buffer: Handle): void {
    this.fn.vkDestroyBuffer(device, buffer, 0n);
  }
  bufferMemoryRequirements(device: Handle, buffer: Handle): Decoded<typeof S.VkMemoryRequirements.fields> {
    const out = pack(S.VkMemoryRequirements);
    this.fn.vkGetBufferMemoryRequirements(device, buffer, out);
    return decode(S.VkMemoryRequirements, out);
  }
  /** A buffer's device address (Vulkan 1.2 bufferDeviceAddress). */
  bufferDeviceAddress(device: Handle, buffer: Handle): bigint {
    const f = this.fn.vkGetBufferDeviceAddress;
    if (!f) throw new VkError("vkGetBufferDeviceAddress", -7);
    return f(device, pack(S.VkBufferDeviceAddressInfo, { buffer }));
  }
  allocateMemory(device: Handle, size: bigint | number, memoryTypeIndex: number, pNext: Uint8Array | null = null): Handle {
    return this.#create("vkAllocateMemory", device, pack(S.VkMemoryAllocateInfo, { pNext, allocationSize: size, memoryTypeIndex }));
  }
  freeMemory(device: Handle, memory: Handle): void {
    this.fn.vkFreeMemory(device, memory, 0n);
  }
  bindBufferMemory(device: Handle, buffer: Handle, memory: Handle, offset: bigint | number = 0n): void {
    this.check("vkBindBufferMemory", this.fn.vkBindBufferMemory(device, buffer, memory, offset));
  }
  /** Maps memory and returns the host address; view it with ptrView(ptr, bytes). */
  mapMemory(device: Handle, memory: Handle, offset: bigint | number = 0n, size: bigint | number = VK_WHOLE_SIZE): Pointer {
    return this.#handle("vkMapMemory", this.fn.vkMapMemory(device, memory, offset, size, 0, this.#u64));
  }
  unmapMemory(device: Handle, memory: Handle): void {
    this.fn.vkUnmapMemory(device, memory);
  }
  /** Makes host writes visible to the device for non-coherent memory. */
  flushMappedMemory(device: Handle, memory: Handle, offset: bigint | number = 0n, size: bigint | number = VK_WHOLE_SIZE): void {
    this.check("vkFlushMappedMemoryRanges", this.fn.vkFlushMappedMemoryRanges(device, 1, pack(S.VkMappedMemoryRange, { memory, offset, size })));
  }
  /** Makes device writes visible to the host for non-coherent memory. */
  invalidateMappedMemory(device: Handle, memory: Handle, offset: bigint | number = 0n, size: bigint | number = VK_WHOLE_SIZE): void {
    this.check("vkInvalidateMappedMemoryRanges", this.fn.vkInvalidateMappedMemoryRanges(device, 1, pack(S.VkMappedMemoryRange, { memory, offset, size })));
  }

  // --- shaders, descriptors, pipelines -------------------------------------------------------------------
  createShaderModule(device: Handle, code: Uint32Array): Handle {
    return this.#create("vkCreateShaderModule", device, pack(S.VkShaderModuleCreateInfo, { codeSize: code.byteLength, pCode: code }));
  }
  destroyShaderModule(device: Handle, module: Handle): void {
    this.fn.vkDestroyShaderModule(device, module, 0n);
  }
  /** Bindings default to one storage buffer visible to the compute stage. */
  createDescriptorSetLayout(device: Handle, bindings: readonly Init<typeof S.VkDescriptorSetLayoutBinding.fields>[], flags = 0): Handle {
    const bs = packArray(S.VkDescriptorSetLayoutBinding, bindings.map((b) => ({ descriptorType: VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount: 1, stageFlags: VK_SHADER_STAGE_COMPUTE_BIT, ...b })));
    return this.#create("vkCreateDescriptorSetLayout", device, pack(S.VkDescriptorSetLayoutCreateInfo, { flags, bindingCount: bindings.length, pBindings: bs }));
  }
  destroyDescriptorSetLayout(device: Handle, layout: Handle): void {
    this.fn.vkDestroyDescriptorSetLayout(device, layout, 0n);
  }
  createDescriptorPool(device: Handle, maxSets: number, sizes: readonly { type: number; descriptorCount: number }[], flags = 0): Handle {
    return this.#create("vkCreateDescriptorPool", device, pack(S.VkDescriptorPoolCreateInfo, { flags, maxSets, poolSizeCount: sizes.length, pPoolSizes: packArray(S.VkDescriptorPoolSize, sizes) }));
  }
  destroyDescriptorPool(device: Handle, pool: Handle): void {
    this.fn.vkDestroyDescriptorPool(device, pool, 0n);
  }
  resetDescriptorPool(device: Handle, pool: Handle): void {
    this.check("vkResetDescriptorPool", this.fn.vkResetDescriptorPool(device, pool, 0));
  }
  allocateDescriptorSets(device: Handle, pool: Handle, layouts: readonly Handle[]): Handle[] {
    const out = new BigUint64Array(Math.max(layouts.length, 1));
    const info = pack(S.VkDescriptorSetAllocateInfo, { descriptorPool: pool, descriptorSetCount: layouts.length, pSetLayouts: handles(layouts) });
    this.check("vkAllocateDescriptorSets", this.fn.vkAllocateDescriptorSets(device, info, out));
    return Array.from(out.subarray(0, layouts.length));
  }
  /** Writes buffer descriptors (storage buffers unless `type` says otherwise); range defaults to VK_WHOLE_SIZE. */
  updateDescriptorSets(device: Handle, writes: readonly DescriptorWrite[]): void {
    const ws = packArray(S.VkWriteDescriptorSet, writes.map((w) => ({
      dstSet: w.set,
      dstBinding: w.binding,
      dstArrayElement: w.arrayElement ?? 0,
      descriptorCount: w.buffers.length,
      descriptorType: w.type ?? VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
      pBufferInfo: packArray(S.VkDescriptorBufferInfo, w.buffers.map((b) => ({ buffer: b.buffer, offset: b.offset ?? 0n, range: b.range ?? VK_WHOLE_SIZE }))),
    })));
    this.fn.vkUpdateDescriptorSets(device, writes.length, ws, 0, null);
  }
  createPipelineLayout(device: Handle, setLayouts: readonly Handle[], pushConstantRanges: readonly Init<typeof S.VkPushConstantRange.fields>[] = []): Handle {
    return this.#create("vkCreatePipelineLayout", device, pack(S.VkPipelineLayoutCreateInfo, {
      setLayoutCount: setLayouts.length,
      pSetLayouts: setLayouts.length ? handles(setLayouts) : null,
      pushConstantRangeCount: pushConstantRanges.length,
      pPushConstantRanges: pushConstantRanges.length ? packArray(S.VkPushConstantRange, pushConstantRanges.map((r) => ({ stageFlags: VK_SHADER_STAGE_COMPUTE_BIT, ...r }))) : null,
    }));
  }
  destroyPipelineLayout(device: Handle, layout: Handle): void {
    this.fn.vkDestroyPipelineLayout(device, layout, 0n);
  }
  createComputePipeline(device: Handle, o: ComputePipelineOptions): Handle {
    const spec = o.specialization
      ? pack(S.VkSpecializationInfo, { mapEntryCount: o.specialization.entries.length, pMapEntries: packArray(S.VkSpecializationMapEntry, o.specialization.entries), dataSize: o.specialization.data.byteLength, pData: o.specialization.data })
      : null;
    const info = pack(S.VkComputePipelineCreateInfo, {
      stage: {
        pNext: o.requiredSubgroupSize ? pack(S.VkPipelineShaderStageRequiredSubgroupSizeCreateInfo, { requiredSubgroupSize: o.requiredSubgroupSize }) : null,
        flags: o.stageFlags ?? 0,
        stage: VK_SHADER_STAGE_COMPUTE_BIT,
        module: o.module,
        pName: o.entry ?? "main",
        pSpecializationInfo: spec,
      },
      flags: o.flags ?? 0,
      layout: o.layout,
      basePipelineIndex: -1,
    });
    return this.#handle("vkCreateComputePipelines", this.fn.vkCreateComputePipelines(device, o.cache ?? 0n, 1, info, 0n, this.#u64));
  }
  destroyPipeline(device: Handle, pipeline: Handle): void {
    this.fn.vkDestroyPipeline(device, pipeline, 0n);
  }

  // --- command pools and buffers -------------------------------------------------------------------------
  createCommandPool(device: Handle, family: number, flags: number = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT): Handle {
    return this.#create("vkCreateCommandPool", device, pack(S.VkCommandPoolCreateInfo, { flags, queueFamilyIndex: family }));
  }
  destroyCommandPool(device: Handle, pool: Handle): void {
    this.fn.vkDestroyCommandPool(device, pool, 0n);
  }
  resetCommandPool(device: Handle, pool: Handle, flags = 0): void {
    this.check("vkResetCommandPool", this.fn.vkResetCommandPool(device, pool, flags));
  }
  allocateCommandBuffers(device: Handle, pool: Handle, count: number): Handle[] {
    const out = new BigUint64Array(Math.max(count, 1));
    const info = pack(S.VkCommandBufferAllocateInfo, { commandPool: pool, level: VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount: count });
    this.check("vkAllocateCommandBuffers", this.fn.vkAllocateCommandBuffers(device, info, out));
    return Array.from(out.subarray(0, count));
  }
  freeCommandBuffers(device: Handle, pool: Handle, cbs: readonly Handle[]): void {
    this.fn.vkFreeCommandBuffers(device, pool, cbs.length, handles(cbs));
  }
  beginCommandBuffer(cb: Handle, flags = 0): void {
    this.check("vkBeginCommandBuffer", this.fn.vkBeginCommandBuffer(cb, pack(S.VkCommandBufferBeginInfo, { flags })));
  }
  endCommandBuffer(cb: Handle): void {
    this.check("vkEndCommandBuffer", this.fn.vkEndCommandBuffer(cb));
  }
  resetCommandBuffer(cb: Handle, flags = 0): void {
    this.check("vkResetCommandBuffer", this.fn.vkResetCommandBuffer(cb, flags));
  }
  cmdBindPipeline(cb: Handle, pipeline: Handle): void {
    this.fn.vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
  }
  cmdBindDescriptorSets(cb: Handle, layout: Handle, firstSet: number, sets: readonly Handle[], dynamicOffsets: readonly number[] = []): void {
    this.fn.vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, firstSet, sets.length, handles(sets), dynamicOffsets.length, dynamicOffsets.length ? new Uint32Array(dynamicOffsets) : null);
  }
  cmdDispatch(cb: Handle, x: number, y = 1, z = 1): void {
    this.fn.vkCmdDispatch(cb, x, y, z);
  }
  cmdDispatchIndirect(cb: Handle, buffer: Handle, offset: bigint | number = 0n): void {
    this.fn.vkCmdDispatchIndirect(cb, buffer, offset);
  }
  cmdCopyBuffer(cb: Handle, src: Handle, dst: Handle, regions: readonly Init<typeof S.VkBufferCopy.fields>[]): void {
    this.fn.vkCmdCopyBuffer(cb, src, dst, regions.length, packArray(S.VkBufferCopy, regions));
  }
  /** Fills `size` bytes (a multiple of 4, or VK_WHOLE_SIZE) with the u32 `data`. */
  cmdFillBuffer(cb: Handle, dst: Handle, offset: bigint | number, size: bigint | number, data: number): void {
    this.fn.vkCmdFillBuffer(cb, dst, offset, size, data >>> 0);
  }
  /** Records an inline update of at most 65536 bytes (copied at record time). */
  cmdUpdateBuffer(cb: Handle, dst: Handle, offset: bigint | number, data: ArrayBufferView): void {
    this.fn.vkCmdUpdateBuffer(cb, dst, offset, data.byteLength, data);
  }
  cmdPushConstants(cb: Handle, layout: Handle, offset: number, data: ArrayBufferView, stages: number = VK_SHADER_STAGE_COMPUTE_BIT): void {
    this.fn.vkCmdPushConstants(cb, layout, stages, offset, data.byteLength, data);
  }
  cmdPipelineBarrier(cb: Handle, o: {
    srcStage: number;
    dstStage: number;
    dependencyFlags?: number;
    memory?: readonly Init<typeof S.VkMemoryBarrier.fields>[];
    buffers?: readonly Init<typeof S.VkBufferMemoryBarrier.fields>[];
  }): void {
    const mem = o.memory ?? [];
    const buf = (o.buffers ?? []).map((b) => ({ srcQueueFamilyIndex: 0xffffffff, dstQueueFamilyIndex: 0xffffffff, size: VK_WHOLE_SIZE, ...b }));
    this.fn.vkCmdPipelineBarrier(cb, o.srcStage, o.dstStage, o.dependencyFlags ?? 0, mem.length, mem.length ? packArray(S.VkMemoryBarrier, mem) : null, buf.length, buf.length ? packArray(S.VkBufferMemoryBarrier, buf) : null, 0, null);
  }
  /** The "full memory barrier between commands" of recorded replays: all writes before, all access after. */
  cmdFullBarrier(cb: Handle): void {
    this.fn.vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, fullBarrier, 0, null, 0, null);
  }
  cmdResetQueryPool(cb: Handle, pool: Handle, first: number, count: number): void {
    this.fn.vkCmdResetQueryPool(cb, pool, first, count);
  }
  cmdWriteTimestamp(cb: Handle, stage: number, pool: Handle, query: number): void {
    this.fn.vkCmdWriteTimestamp(cb, stage, pool, query);
  }

  // --- synchronization and queries -----------------------------------------------------------------------
  createFence(device: Handle, signaled = false): Handle {
    return this.#create("vkCreateFence", device, pack(S.VkFenceCreateInfo, { flags: signaled ? VK_FENCE_CREATE_SIGNALED_BIT : 0 }));
  }
  destroyFence(device: Handle, fence: Handle): void {
    this.fn.vkDestroyFence(device, fence, 0n);
  }
  resetFences(device: Handle, fences: readonly Handle[] | BigUint64Array): void {
    const fs = handles(fences);
    this.check("vkResetFences", this.fn.vkResetFences(device, fences.length, fs));
  }
  /** true once signaled; VK_ERROR_DEVICE_LOST throws. */
  fenceSignaled(device: Handle, fence: Handle): boolean {
    return this.check("vkGetFenceStatus", this.fn.vkGetFenceStatus(device, fence)) !== VK_NOT_READY;
  }
  /** Waits up to `timeoutNs`; false on VK_TIMEOUT. Pass a BigUint64Array to avoid an allocation per wait. */
  waitForFences(device: Handle, fences: readonly Handle[] | BigUint64Array, timeoutNs: bigint, waitAll = true): boolean {
    const r = this.check("vkWaitForFences", this.fn.vkWaitForFences(device, fences.length, handles(fences), waitAll ? 1 : 0, timeoutNs));
    return r !== VK_TIMEOUT;
  }
  /** A binary semaphore, or a timeline semaphore starting at `timelineInitial`. */
  createSemaphore(device: Handle, timelineInitial?: bigint): Handle {
    const next = timelineInitial === undefined ? null : pack(S.VkSemaphoreTypeCreateInfo, { semaphoreType: VK_SEMAPHORE_TYPE_TIMELINE, initialValue: timelineInitial });
    return this.#create("vkCreateSemaphore", device, pack(S.VkSemaphoreCreateInfo, { pNext: next }));
  }
  destroySemaphore(device: Handle, semaphore: Handle): void {
    this.fn.vkDestroySemaphore(device, semaphore, 0n);
  }
  semaphoreCounterValue(device: Handle, semaphore: Handle): bigint {
    const f = this.fn.vkGetSemaphoreCounterValue;
    if (!f) throw new VkError("vkGetSemaphoreCounterValue", -7);
    return this.#handle("vkGetSemaphoreCounterValue", f(device, semaphore, this.#u64));
  }
  /** Waits until each timeline semaphore reaches its value (or any, with `any`); false on VK_TIMEOUT. */
  waitSemaphores(device: Handle, semaphores: readonly Handle[], values: readonly bigint[], timeoutNs: bigint, any = false): boolean {
    const f = this.fn.vkWaitSemaphores;
    if (!f) throw new VkError("vkWaitSemaphores", -7);
    const info = pack(S.VkSemaphoreWaitInfo, { flags: any ? VK_SEMAPHORE_WAIT_ANY_BIT : 0, semaphoreCount: semaphores.length, pSemaphores: handles(semaphores), pValues: handles(values) });
    return this.check("vkWaitSemaphores", f(device, info, timeoutNs)) !== VK_TIMEOUT;
  }
  signalSemaphore(device: Handle, semaphore: Handle, value: bigint): void {
    const f = this.fn.vkSignalSemaphore;
    if (!f) throw new VkError("vkSignalSemaphore", -7);
    this.check("vkSignalSemaphore", f(device, pack(S.VkSemaphoreSignalInfo, { semaphore, value })));
  }
  createQueryPool(device: Handle, queryType: number, count: number): Handle {
    return this.#create("vkCreateQueryPool", device, pack(S.VkQueryPoolCreateInfo, { queryType, queryCount: count }));
  }
  destroyQueryPool(device: Handle, pool: Handle): void {
    this.fn.vkDestroyQueryPool(device, pool, 0n);
  }
  /** 64-bit results of `count` queries, waiting for them. Timestamps are in ticks of limits.timestampPeriod ns. */
  queryResults(device: Handle, pool: Handle, first: number, count: number): BigUint64Array {
    const out = new BigUint64Array(count);
    this.check("vkGetQueryPoolResults", this.fn.vkGetQueryPoolResults(device, pool, first, count, out.byteLength, out, 8n, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    return out;
  }
}

const fullBarrier = pack(S.VkMemoryBarrier, {
  srcAccessMask: VK_ACCESS_MEMORY_WRITE_BIT,
  dstAccessMask: VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT,
});
