// Buffers: one VkBuffer + VkDeviceMemory each (a model has hundreds of tensors, far under any allocation
// limit). Host-visible coherent memory stays mapped for the buffer's life, so `write` into it is a memcpy and
// `read` a copy out; device-only memory goes through a staging buffer and a one-off transfer submission.
import { ptrView } from "../../ffi/lib.ts";
import * as vk from "../../ffi/vulkan.ts";
import type { DeviceBuffer } from "../device.ts";
import { type Context, memoryType } from "./context.ts";

export interface VkBuf extends DeviceBuffer {
  readonly bytes: number;
  /** Allocated size (bytes rounded up to 16, so u32/uvec4 views of the tail stay inside). */
  readonly size: number;
  readonly buffer: bigint;
  readonly memory: bigint;
  /** The mapping, when the memory is host-visible and coherent. */
  readonly host: Uint8Array | undefined;
  /** Memory type index the allocation came from (memory reports). */
  readonly type: number;
  /** What the buffer was asked for as (memory reports). */
  readonly usage: "device" | "upload" | "readback";
  freed: boolean;
}

const USAGE = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
  vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT;

/** Creates, backs and (when possible) maps a buffer. VkError propagates (the caller maps it to typed errors). */
export function createBuf(ctx: Context, bytes: number, usage: "device" | "upload" | "readback", map = true): VkBuf {
  const { api, device } = ctx;
  const size = Math.max(16, Math.ceil(bytes / 16) * 16);
  const buffer = api.createBuffer(device, size, USAGE);
  let memory = 0n;
  try {
    const req = api.bufferMemoryRequirements(device, buffer);
    const type = memoryType(ctx, req.memoryTypeBits, usage);
    memory = api.allocateMemory(device, req.size, type.index);
    api.bindBufferMemory(device, buffer, memory);
    const host = type.mappable && map ? new Uint8Array(ptrView(api.mapMemory(device, memory), size)) : undefined;
    return { bytes, size, buffer, memory, host, type: type.index, usage, freed: false };
  } catch (e) {
    if (memory) api.freeMemory(device, memory);
    api.destroyBuffer(device, buffer);
    throw e;
  }
}

export function destroyBuf(ctx: Context, b: VkBuf): void {
  if (b.freed) return;
  b.freed = true;
  ctx.api.destroyBuffer(ctx.device, b.buffer);
  ctx.api.freeMemory(ctx.device, b.memory); // unmaps implicitly
}

/** One heap as the driver reports it, with VK_EXT_memory_budget's budget and usage where supported. */
export interface HeapReport {
  index: number;
  bytes: number;
  deviceLocal: boolean;
  budget?: number;
  usage?: number;
}
/** One memory type, and the bytes of this device's live buffers that came from it. */
export interface TypeReport {
  index: number;
  heap: number;
  /** Property flags spelled out: DL (device-local), HV (host-visible), HC (coherent), CA (cached). */
  flags: string;
  buffers: number;
  bytes: number;
}
/** Where a device's buffers live: heaps, types, and the largest buffers' placement. */
export interface MemoryReport {
  heaps: HeapReport[];
  types: TypeReport[];
  /** Buffers of at least 64 MiB (or the 8 largest), largest first. */
  large: { bytes: number; usage: string; type: number }[];
}

export function typeFlags(f: number): string {
  const names: [number, string][] = [
    [vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, "DL"], [vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT, "HV"],
    [vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, "HC"], [vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT, "CA"],
  ];
  return names.filter(([b]) => f & b).map(([, n]) => n).join("|") || "-";
}

export function memoryReport(ctx: Context, bufs: Iterable<VkBuf>): MemoryReport {
  const { memory } = ctx;
  let budget: { heapBudget: bigint[]; heapUsage: bigint[] } | undefined;
  if (ctx.memoryBudget) {
    try {
      budget = ctx.api.memoryBudget(ctx.pd)[1] as unknown as { heapBudget: bigint[]; heapUsage: bigint[] };
    } catch { /* a driver without the query: no budget figures */ }
  }
  const heaps: HeapReport[] = [];
  for (let h = 0; h < memory.memoryHeapCount; h++) {
    const heap = memory.memoryHeaps[h];
    heaps.push({
      index: h, bytes: Number(heap.size), deviceLocal: (heap.flags & vk.VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) !== 0,
      budget: budget ? Number(budget.heapBudget[h]) : undefined, usage: budget ? Number(budget.heapUsage[h]) : undefined,
    });
  }
  const types: TypeReport[] = [];
  for (let i = 0; i < memory.memoryTypeCount; i++) {
    const t = memory.memoryTypes[i];
    types.push({ index: i, heap: t.heapIndex, flags: typeFlags(t.propertyFlags), buffers: 0, bytes: 0 });
  }
  const all = [...bufs].filter((b) => !b.freed);
  for (const b of all) {
    types[b.type].buffers++;
    types[b.type].bytes += b.size;
  }
  all.sort((a, b) => b.size - a.size);
  const large = all.filter((b, i) => b.size >= 64 << 20 || i < 8).map((b) => ({ bytes: b.size, usage: b.usage, type: b.type }));
  return { heaps, types, large };
}
