// Recording: a list of device steps baked into command buffers once. Each dispatch gets its own descriptor
// set (written here, never again) and, when its kernel has checks, its own error word: a slot of one small
// host-visible buffer, aligned to the device's storage offset alignment. A barrier (compute and transfer
// writes before it visible to compute and transfer after it) sits before a step only where the step touches
// bytes that a step since the last barrier wrote (read after write, write after write) or reads bytes it
// writes (write after read): kernels/hazards.ts, shared with ROCm; steps with no such overlap run without
// one (allBarriers: before every step, as a full memory barrier). Each command buffer ends with a full barrier and one that makes its writes visible
// to the host.
//
// With timestamps enabled, each step is bracketed by two timestamps of the recording's query pool (start at
// the top of the pipe after the barrier before it, end at the bottom after it); each command buffer resets its
// own queries first.
//
// A watchdog budget cuts the steps into several command buffers by their work weights, so no single
// submission runs past it; without a budget the whole recording is one command buffer.
import * as vk from "../../ffi/vulkan.ts";
import type { Kernel } from "../../kernels/ir.ts";
import type { CompiledKernel, DeviceBinding, DeviceStep, Recording } from "../device.ts";
import { Unsupported } from "../errors.ts";
import { barriersBefore, type StepAccess } from "../../kernels/hazards.ts";
import type { Context } from "./context.ts";
import { createBuf, destroyBuf, type VkBuf } from "./memory.ts";

export interface VkKernel extends CompiledKernel {
  readonly kernel: Kernel;
  readonly pipeline: bigint;
  readonly layout: bigint;
  readonly dsl: bigint;
  /** Descriptor bindings: the kernel's buffers, then the error word when errorBinding is set. */
  readonly bindings: number;
  readonly errorBinding: number | undefined;
}

export interface VkRecording extends Recording {
  readonly steps: number;
  readonly cbs: bigint[];
  /** Submit info of each command buffer, packed once and resubmitted verbatim. */
  readonly submits: vk.PackedSubmits[];
  /** The error-word slots each command buffer's dispatches write: [first, end). */
  readonly slotRanges: [number, number][];
  /** Kernel name of each error slot. */
  readonly slotKernels: string[];
  /** Error words (one per slot, `stride` words apart), or undefined when no dispatch has checks. */
  readonly errors: VkBuf | undefined;
  readonly words: Uint32Array | undefined;
  readonly stride: number;
  readonly pool: bigint;
  /** An eager run's one-off recording, released once its work is done. */
  readonly transient: boolean;
  released: boolean;
  /** Timestamp query pool (2 per step) when the device times steps, else 0n. */
  readonly queries: bigint;
  /** A replay has finished since recording, so every query holds a value. */
  timed: boolean;
  /** Barriers between steps inside its command buffers (the ones the hazards needed). */
  readonly barriers: number;
}

/**
 * Groups consecutive steps so that each group's summed work stays within `budget` (a step larger than the
 * budget goes alone). budget 0 = one group. Returns each group's step count.
 */
export function splitByBudget(works: readonly number[], budget: number): number[] {
  if (!budget || works.length === 0) return works.length ? [works.length] : [];
  const out: number[] = [];
  let n = 0, sum = 0;
  for (const w of works) {
    if (n > 0 && sum + w > budget) {
      out.push(n);
      n = 0;
      sum = 0;
    }
    n++;
    sum += w;
  }
  out.push(n);
  return out;
}

function asBuf(b: DeviceBinding): VkBuf {
  const v = b.buffer as VkBuf;
  if (v.buffer === undefined) throw new Unsupported("vulkan: a binding's buffer is not a Vulkan buffer");
  if (v.freed) throw new Unsupported("vulkan: a binding's buffer was freed");
  return v;
}

/** The range a binding covers: whole words (views read u32s), inside the buffer, within the device limit. */
function range(ctx: Context, b: DeviceBinding, what: string): { buffer: bigint; offset: number; range: number } {
  const v = asBuf(b);
  const caps = ctx.target.caps;
  if (b.offset % caps.bindingAlign !== 0) {
    throw new Unsupported(`vulkan: ${what} offset ${b.offset} is not a multiple of ${caps.bindingAlign}`);
  }
  if (b.offset < 0 || b.bytes < 0 || b.offset + b.bytes > v.bytes) {
    throw new Unsupported(`vulkan: ${what} [${b.offset}, +${b.bytes}) is outside its ${v.bytes}-byte buffer`);
  }
  const r = Math.min(Math.max(4, Math.ceil(b.bytes / 4) * 4), v.size - b.offset);
  if (r > caps.maxBindingBytes) throw new Unsupported(`vulkan: ${what} of ${r} bytes exceeds maxStorageBufferRange ${caps.maxBindingBytes}`);
  return { buffer: v.buffer, offset: b.offset, range: r };
}

/** Makes every write of the commands before it visible to host reads (mapped readback) after the fence. */
export function cmdHostBarrier(api: Context["api"], cb: bigint): void {
  api.cmdPipelineBarrier(cb, {
    srcStage: vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT,
    dstStage: vk.VK_PIPELINE_STAGE_HOST_BIT,
    memory: [{ srcAccessMask: vk.VK_ACCESS_MEMORY_WRITE_BIT, dstAccessMask: vk.VK_ACCESS_HOST_READ_BIT }],
  });
}

/** Byte ranges one step reads and writes, by VkBuffer. */
function accessOf(ctx: Context, s: DeviceStep): StepAccess {
  const span = (b: DeviceBinding, what: string) => {
    const r = s.k === "copy" ? { buffer: asBuf(b).buffer, offset: b.offset, range: b.bytes } : range(ctx, b, what);
    return { buffer: r.buffer, lo: r.offset, hi: r.offset + r.range };
  };
  if (s.k === "copy") return { reads: [span(s.src, "copy source")], writes: [span(s.dst, "copy destination")] };
  const k = (s.compiled as VkKernel).kernel;
  const out: StepAccess = { reads: [], writes: [] };
  s.bindings.forEach((b, j) => {
    const acc = k.buffers[j].access, r = span(b, `binding ${j}`);
    if (acc !== "w") out.reads.push(r);
    if (acc !== "r") out.writes.push(r);
  });
  return out; // the error word: each dispatch has its own
}

/** Whether compute and/or transfer work is on either side of a barrier. */
interface Kinds {
  compute: boolean;
  transfer: boolean;
}

/**
 * The writes of the steps before (of kinds `before`) made available and visible to the reads and writes of the
 * step after (of kinds `after`), naming only the stages that run there (a compute-to-compute barrier is the
 * common one, and the lightest).
 */
function cmdStepBarrier(api: Context["api"], cb: bigint, before: Kinds, after: Kinds): void {
  const stage = (k: Kinds) => (k.compute ? vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT : 0) | (k.transfer ? vk.VK_PIPELINE_STAGE_TRANSFER_BIT : 0);
  api.cmdPipelineBarrier(cb, {
    srcStage: stage(before),
    dstStage: stage(after),
    memory: [{
      srcAccessMask: (before.compute ? vk.VK_ACCESS_SHADER_WRITE_BIT : 0) | (before.transfer ? vk.VK_ACCESS_TRANSFER_WRITE_BIT : 0),
      dstAccessMask: (after.compute ? vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT : 0) |
        (after.transfer ? vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT : 0),
    }],
  });
}

export function buildRecording(ctx: Context, cmdPool: bigint, steps: DeviceStep[], perStep: boolean, allBarriers = false): VkRecording {
  const { api, device, target } = ctx;
  const caps = target.caps;
  const kernels = steps.filter((s) => s.k === "kernel");
  // Validate everything before creating any object.
  steps.forEach((s, i) => {
    if (s.k === "copy") {
      const src = asBuf(s.src), dst = asBuf(s.dst);
      if (s.src.bytes > s.dst.bytes || s.src.offset + s.src.bytes > src.bytes || s.dst.offset + s.src.bytes > dst.bytes) {
        throw new Unsupported(`vulkan: step ${i}: copy of ${s.src.bytes} bytes does not fit`);
      }
      return;
    }
    const k = s.compiled as VkKernel;
    if (k.pipeline === undefined) throw new Unsupported(`vulkan: step ${i}: kernel was not compiled by this device`);
    if (s.bindings.length !== k.kernel.buffers.length) {
      throw new Unsupported(`vulkan: step ${i} (${k.kernel.name}): ${s.bindings.length} bindings for ${k.kernel.buffers.length} buffers`);
    }
    s.bindings.forEach((b, j) => range(ctx, b, `step ${i} (${k.kernel.name}) binding ${j}`));
    s.grid.forEach((g, d) => {
      if (!Number.isInteger(g) || g < 1 || g > caps.maxWorkgroupsPerDim[d]) {
        throw new Unsupported(`vulkan: step ${i} (${k.kernel.name}): grid ${s.grid.join("x")} exceeds the device's limits`);
      }
    });
  });

  const groups = perStep ? steps.map(() => 1) : splitByBudget(steps.map((s) => s.work.bytes), target.watchdogBudget);
  const checked = kernels.filter((s) => (s.compiled as VkKernel).errorBinding !== undefined).length;
  const strideBytes = caps.bindingAlign;
  let errors: VkBuf | undefined;
  let pool = 0n, queries = 0n;
  let cbs: bigint[] = [];
  try {
    if (ctx.enabled.timestamps && steps.length) queries = api.createQueryPool(device, vk.VK_QUERY_TYPE_TIMESTAMP, 2 * steps.length);
    if (checked) {
      errors = createBuf(ctx, checked * strideBytes, "readback");
      if (!errors.host) throw new Unsupported("vulkan: no host-visible memory for error words");
      errors.host.fill(0);
    }
    const nDesc = kernels.reduce((n, s) => n + (s.compiled as VkKernel).bindings, 0);
    let sets: bigint[] = [];
    if (kernels.length) {
      pool = api.createDescriptorPool(device, kernels.length, [{ type: vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount: nDesc }]);
      sets = api.allocateDescriptorSets(device, pool, kernels.map((s) => (s.compiled as VkKernel).dsl));
    }
    const writes: vk.DescriptorWrite[] = [];
    const slotOf: number[] = [];
    const slotKernels: string[] = [];
    kernels.forEach((s, i) => {
      const k = s.compiled as VkKernel;
      s.bindings.forEach((b, j) => {
        const r = range(ctx, b, `binding ${j}`);
        writes.push({ set: sets[i], binding: j, buffers: [{ buffer: r.buffer, offset: r.offset, range: r.range }] });
      });
      if (k.errorBinding !== undefined) {
        const slot = slotKernels.length;
        slotKernels.push(k.kernel.name);
        slotOf[i] = slot;
        writes.push({ set: sets[i], binding: k.errorBinding, buffers: [{ buffer: errors!.buffer, offset: slot * strideBytes, range: 4 }] });
      }
    });
    if (writes.length) api.updateDescriptorSets(device, writes);

    cbs = api.allocateCommandBuffers(device, cmdPool, groups.length);
    const slotRanges: [number, number][] = [];
    let at = 0, kernelIndex = 0, slot = 0, barriers = 0;
    groups.forEach((n, g) => {
      const cb = cbs[g];
      const first = slot;
      api.beginCommandBuffer(cb);
      if (queries) api.cmdResetQueryPool(cb, queries, 2 * at, 2 * n);
      let bound = 0n;
      // The command buffer starts after a full barrier (or a fence): hazards count from its first step. Kinds of
      // the steps since the last barrier name the stages the next barrier waits on.
      const group = steps.slice(at, at + n);
      const need = barriersBefore(group.map((s) => accessOf(ctx, s)), allBarriers);
      const kinds: Kinds = { compute: false, transfer: false };
      for (const [j, s] of group.entries()) {
        const kind = { compute: s.k === "kernel", transfer: s.k === "copy" };
        if (need[j]) {
          if (allBarriers) api.cmdFullBarrier(cb);
          else cmdStepBarrier(api, cb, kinds, kind);
          kinds.compute = kinds.transfer = false;
          barriers++;
        }
        kinds.compute ||= kind.compute;
        kinds.transfer ||= kind.transfer;
        if (queries) api.cmdWriteTimestamp(cb, vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries, 2 * (at + j));
        if (s.k === "kernel") {
          const k = s.compiled as VkKernel;
          if (k.pipeline !== bound) api.cmdBindPipeline(cb, bound = k.pipeline);
          api.cmdBindDescriptorSets(cb, k.layout, 0, [sets[kernelIndex]]);
          api.cmdDispatch(cb, s.grid[0], s.grid[1], s.grid[2]);
          if (slotOf[kernelIndex] !== undefined) slot++;
          kernelIndex++;
        } else {
          api.cmdCopyBuffer(cb, asBuf(s.src).buffer, asBuf(s.dst).buffer, [{ srcOffset: s.src.offset, dstOffset: s.dst.offset, size: s.src.bytes }]);
        }
        if (queries) api.cmdWriteTimestamp(cb, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries, 2 * (at + j) + 1);
      }
      api.cmdFullBarrier(cb);
      cmdHostBarrier(api, cb);
      api.endCommandBuffer(cb);
      slotRanges.push([first, slot]);
      at += n;
    });
    return {
      steps: steps.length,
      cbs,
      submits: cbs.map((cb) => api.packSubmits([{ commandBuffers: [cb] }])),
      slotRanges,
      slotKernels,
      errors,
      words: errors ? new Uint32Array(errors.host!.buffer, errors.host!.byteOffset, errors.size >> 2) : undefined,
      stride: strideBytes >> 2,
      pool,
      transient: perStep,
      released: false,
      queries,
      timed: false,
      barriers,
    };
  } catch (e) {
    if (queries) api.destroyQueryPool(device, queries);
    if (cbs.length) api.freeCommandBuffers(device, cmdPool, cbs);
    if (pool) api.destroyDescriptorPool(device, pool);
    if (errors) destroyBuf(ctx, errors);
    throw e;
  }
}

export function releaseRecording(ctx: Context, cmdPool: bigint, rec: VkRecording): void {
  if (rec.released) return;
  rec.released = true;
  if (rec.cbs.length) ctx.api.freeCommandBuffers(ctx.device, cmdPool, rec.cbs);
  if (rec.pool) ctx.api.destroyDescriptorPool(ctx.device, rec.pool);
  if (rec.queries) ctx.api.destroyQueryPool(ctx.device, rec.queries);
  if (rec.errors) destroyBuf(ctx, rec.errors);
}
