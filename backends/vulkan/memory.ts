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
    return { bytes, size, buffer, memory, host, freed: false };
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

/** True when every byte is zero (so a transfer can be a vkCmdFillBuffer instead of a staged copy). */
export function allZero(data: Uint8Array): boolean {
  let i = 0;
  if ((data.byteOffset & 3) === 0) {
    const n = data.byteLength >> 2;
    const w = new Uint32Array(data.buffer, data.byteOffset, n);
    for (; i < n; i++) if (w[i] !== 0) return false;
    i = n << 2;
  }
  for (; i < data.byteLength; i++) if (data[i] !== 0) return false;
  return true;
}
