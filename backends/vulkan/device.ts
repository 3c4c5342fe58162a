// VulkanDevice: the raw-Vulkan Device. Pipelines are made by `compile` (SPIR-V from kernels/render/spirv.ts),
// command buffers by `record` (once), and `replay` resubmits them verbatim, one submission at a time with a
// fence wait after each; `synchronize` drives those waits and raises the staged faults.
//
// Failure model (spec, "Failure handling"): a failing check ORs its code into the dispatch's error word, the
// replay stops there and synchronize raises KernelFault {kernel, code} (the device stays usable). A failed
// submit or fence wait (device loss included) poisons the device and raises DeviceLost; a wait past its bound
// poisons and raises DeviceTimeout. A poisoned device refuses everything as Poisoned and frees nothing: the
// work still on the queue may reference any of it.
import * as vk from "../../ffi/vulkan.ts";
import type { Kernel } from "../../kernels/ir.ts";
import { KernelError } from "../../kernels/ir.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { type Device, type DeviceBuffer, type DeviceStep, type Recording, type StepTime, stepTimesOf } from "../device.ts";
import { DeviceLost, DeviceTimeout, ExecError, KernelFault, OutOfMemory, Poisoned, Unsupported } from "../errors.ts";
import { type Context, type Enabled, openContext, type VulkanOptions } from "./context.ts";
import { createBuf, destroyBuf, type MemoryReport, memoryReport, type VkBuf } from "./memory.ts";
import { allZero } from "../bytes.ts";
import { buildRecording, cmdHostBarrier, releaseRecording, type VkKernel, type VkRecording } from "./recording.ts";

export type { VulkanOptions } from "./context.ts";

const STAGING_MAX = 32 << 20;
const NS_PER_MS = 1_000_000n;

interface Submission {
  rec: VkRecording;
  cb: number;
}

export class VulkanDevice implements Device {
  readonly target: TargetSet;
  #poisoned: string | undefined;
  readonly #ctx: Context;
  readonly #timeoutMs: number;
  readonly #mapDevice: boolean;
  readonly #allBarriers: boolean;
  readonly #spinMs: number;
  readonly #unroll: boolean;
  readonly #restrictReads: boolean;
  readonly #cmdPool: bigint;
  readonly #fence: bigint;
  readonly #fences: BigUint64Array;
  readonly #xferFence: bigint;
  readonly #xferFences: BigUint64Array;
  readonly #xferCb: bigint;
  #xferSubmit: vk.PackedSubmits | undefined;
  #staging: VkBuf | undefined;
  readonly #buffers = new Set<VkBuf>();
  readonly #kernels = new Map<Kernel, VkKernel>();
  /** One compiled pipeline per distinct shader (its bindings, flags and SPIR-V words). */
  readonly #byShader = new Map<string, VkKernel>();
  readonly #recordings = new Set<VkRecording>();
  /** Command buffers waiting to be submitted, in order; `#inflight` is the one on the queue. */
  #pending: Submission[] = [];
  #inflight: Submission | undefined;
  /** Submissions made so far (tests count them: a budget cut shows as more than one per replay). */
  submissions = 0;

  constructor(ctx: Context, opts: VulkanOptions = {}) {
    this.#ctx = ctx;
    this.target = ctx.target;
    this.#timeoutMs = opts.timeoutMs ?? 600_000;
    this.#mapDevice = !opts.stageDeviceMemory;
    this.#allBarriers = opts.allBarriers ?? false;
    // a CPU device's driver threads do the work on the host's cores: a polling wait takes one from them (lavapipe,
    // tests/serve/scheduler.test.ts's vulkan run: 18.1 CPU-s against 28.8 with 20 ms of polling)
    this.#spinMs = opts.spinMs ?? (ctx.cpu ? 0 : 20);
    this.#unroll = opts.unroll ?? true;
    this.#restrictReads = opts.restrictReads ?? false;
    const { api, device, family } = ctx;
    this.#cmdPool = api.createCommandPool(device, family);
    this.#fence = api.createFence(device);
    this.#fences = new BigUint64Array([this.#fence]);
    this.#xferFence = api.createFence(device);
    this.#xferFences = new BigUint64Array([this.#xferFence]);
    [this.#xferCb] = api.allocateCommandBuffers(device, this.#cmdPool, 1);
  }

  get poisoned(): string | undefined {
    return this.#poisoned;
  }

  #live(): void {
    if (this.#poisoned !== undefined) throw new Poisoned("vulkan", this.#poisoned);
  }
  #poison(reason: string): void {
    this.#poisoned ??= reason;
    this.#pending = [];
  }
  /** Maps a Vulkan error from a non-queue call to a typed one (device loss poisons). */
  #vk<T>(what: string, f: () => T, bytes = 0): T {
    try {
      return f();
    } catch (e) {
      if (!(e instanceof vk.VkError)) throw e;
      if (e.code === vk.VK_ERROR_DEVICE_LOST) {
        this.#poison(`${what}: ${e.result}`);
        throw new DeviceLost("vulkan", `${what}: ${e.message}`);
      }
      if (e.code === vk.VK_ERROR_OUT_OF_DEVICE_MEMORY || e.code === vk.VK_ERROR_OUT_OF_HOST_MEMORY) {
        throw new OutOfMemory("vulkan", bytes, `${what}: ${e.result}`);
      }
      throw new ExecError(`vulkan: ${what}: ${e.message}`);
    }
  }

  // ---- memory ----

  alloc(bytes: number, usage: "device" | "upload" | "readback"): DeviceBuffer {
    this.#live();
    if (!Number.isInteger(bytes) || bytes < 0) throw new Unsupported(`vulkan: cannot allocate ${bytes} bytes`);
    const b = this.#vk(`allocating ${bytes} bytes`, () => createBuf(this.#ctx, bytes, usage, usage !== "device" || this.#mapDevice), bytes);
    this.#buffers.add(b);
    return b;
  }

  free(buf: DeviceBuffer): void {
    if (this.#poisoned !== undefined) return; // leaked: queued work may still reference it
    const b = buf as VkBuf;
    if (!this.#buffers.delete(b)) return;
    destroyBuf(this.#ctx, b);
  }

  #buf(buf: DeviceBuffer, offset: number, bytes: number): VkBuf {
    const b = buf as VkBuf;
    if (!this.#buffers.has(b)) throw new ExecError("vulkan: not a live buffer of this device");
    if (offset < 0 || bytes < 0 || offset + bytes > b.bytes) {
      throw new ExecError(`vulkan: range [${offset}, +${bytes}) outside a ${b.bytes}-byte buffer`);
    }
    return b;
  }

  write(buf: DeviceBuffer, offset: number, data: Uint8Array): void {
    this.#live();
    const b = this.#buf(buf, offset, data.byteLength);
    if (b.host) {
      b.host.set(data, offset);
      return;
    }
    if (data.byteLength === 0) return;
    if ((offset & 3) === 0 && (data.byteLength & 3) === 0 && allZero(data)) {
      this.#transfer("zero fill", (cb) => this.#ctx.api.cmdFillBuffer(cb, b.buffer, offset, data.byteLength, 0));
      return;
    }
    for (let at = 0; at < data.byteLength; at += STAGING_MAX) {
      const n = Math.min(STAGING_MAX, data.byteLength - at);
      const st = this.#stagingOf(n);
      st.host!.set(data.subarray(at, at + n));
      this.#transfer("upload", (cb) =>
        this.#ctx.api.cmdCopyBuffer(cb, st.buffer, b.buffer, [{ srcOffset: 0, dstOffset: offset + at, size: n }]));
    }
  }

  // deno-lint-ignore require-await
  async read(buf: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    this.#live();
    const b = this.#buf(buf, offset, bytes);
    if (b.host) return b.host.slice(offset, offset + bytes);
    const out = new Uint8Array(bytes);
    for (let at = 0; at < bytes; at += STAGING_MAX) {
      const n = Math.min(STAGING_MAX, bytes - at);
      const st = this.#stagingOf(n);
      this.#transfer("readback", (cb) =>
        this.#ctx.api.cmdCopyBuffer(cb, b.buffer, st.buffer, [{ srcOffset: offset + at, dstOffset: 0, size: n }]));
      out.set(st.host!.subarray(0, n), at);
    }
    return out;
  }

  #stagingOf(bytes: number): VkBuf {
    if (this.#staging && this.#staging.bytes >= bytes) return this.#staging;
    if (this.#staging) destroyBuf(this.#ctx, this.#staging);
    this.#staging = undefined;
    const size = Math.min(STAGING_MAX, Math.max(bytes, 1 << 20));
    const st = this.#vk("allocating a staging buffer", () => createBuf(this.#ctx, size, "readback"), size);
    if (!st.host) throw new Unsupported("vulkan: no host-visible memory for staging");
    return this.#staging = st;
  }

  /** Records `f` into the transfer command buffer between full barriers, submits it and waits (bounded). */
  #transfer(what: string, f: (cb: bigint) => void): void {
    const { api } = this.#ctx;
    const cb = this.#xferCb;
    this.#vk(what, () => {
      api.resetCommandBuffer(cb);
      api.beginCommandBuffer(cb, vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT);
      api.cmdFullBarrier(cb);
      f(cb);
      api.cmdFullBarrier(cb);
      cmdHostBarrier(api, cb);
      api.endCommandBuffer(cb);
    });
    this.#xferSubmit ??= api.packSubmits([{ commandBuffers: [cb] }]);
    this.#submit(what, this.#xferSubmit, this.#xferFence);
    this.#wait(what, this.#xferFences, this.#timeoutMs);
  }
  #submit(what: string, submit: vk.PackedSubmits, fence: bigint): void {
    const { api, queue } = this.#ctx;
    try {
      api.queueSubmit(queue, submit, fence);
      this.submissions++;
    } catch (e) {
      const detail = e instanceof vk.VkError ? e.result : String(e);
      this.#poison(`vkQueueSubmit (${what}) failed: ${detail}`);
      throw new DeviceLost("vulkan", `vkQueueSubmit (${what}) failed: ${detail}`);
    }
  }
  /**
   * Waits for the fence up to waitMs; `boundMs` is the caller's whole bound, for messages. It polls the fence
   * for the first spinMs (a decode step's work is done within a few ms, and a blocking wait's wake-up costs
   * tens of µs per step), then blocks.
   */
  #wait(what: string, fences: BigUint64Array, waitMs: number, boundMs = waitMs): void {
    const { api, device } = this.#ctx;
    let done = false;
    try {
      const t0 = performance.now(), spin = Math.min(waitMs, this.#spinMs);
      while (!(done = api.fenceSignaled(device, fences[0])) && performance.now() - t0 < spin);
      if (!done) done = api.waitForFences(device, fences, BigInt(Math.max(0, Math.ceil(waitMs - (performance.now() - t0)))) * NS_PER_MS);
    } catch (e) {
      const detail = e instanceof vk.VkError ? e.result : String(e);
      this.#poison(`vkWaitForFences (${what}) failed: ${detail}`);
      throw new DeviceLost("vulkan", `vkWaitForFences (${what}) failed: ${detail}`);
    }
    if (!done) {
      this.#poison(`${what} did not finish within ${boundMs} ms`);
      throw new DeviceTimeout("vulkan", what, boundMs);
    }
    this.#vk(`resetting a fence after ${what}`, () => api.resetFences(device, fences));
  }

  // ---- kernels and recordings ----

  compile(kernel: Kernel): VkKernel {
    this.#live();
    const known = this.#kernels.get(kernel);
    if (known) return known;
    const { api, device, enabled } = this.#ctx;
    const [wx, wy, wz] = kernel.workgroup;
    const lim = enabled.maxWorkgroupDims;
    if (wx > lim[0] || wy > lim[1] || wz > lim[2]) {
      throw new Unsupported(`vulkan: ${kernel.name}: workgroup ${wx}x${wy}x${wz} exceeds ${lim.join("x")}`);
    }
    let shader;
    try {
      shader = RENDERERS.spirv.render(kernel, this.target.caps, { unroll: this.#unroll, restrictReads: this.#restrictReads });
    } catch (e) {
      if (e instanceof KernelError) throw new Unsupported(`vulkan: ${e.message}`);
      throw e;
    }
    if (shader.needs.dotProduct && !enabled.dotProduct) throw new Unsupported(`vulkan: ${kernel.name}: OpSDot needs shaderIntegerDotProduct, which this device lacks`);
    if (shader.needs.coop && !enabled.coop) throw new Unsupported(`vulkan: ${kernel.name}: cooperative matrices are off on this device`);
    if (shader.bindings > enabled.maxStorageBuffers) {
      throw new Unsupported(`vulkan: ${kernel.name}: ${shader.bindings} storage buffers exceed the device's ${enabled.maxStorageBuffers}`);
    }
    const what = `compiling ${kernel.name}`;
    // Kernels that render to the same SPIR-V (the same step in another entry or another engine on this device)
    // share one pipeline, as wgpu's share one per WGSL text: on lavapipe a pipeline costs tens of ms of LLVM.
    const full = shader.needs.subgroups && enabled.fullSubgroups && wx % enabled.maxSubgroupSize === 0;
    const key = `${shader.bindings}:${shader.errorBinding}:${full}:${wordsKey(shader.words)}`;
    const same = this.#byShader.get(key);
    if (same) {
      const k: VkKernel = { ...same, kernel };
      this.#kernels.set(kernel, k);
      return k;
    }
    let module = 0n, dsl = 0n, layout = 0n;
    try {
      module = this.#vk(what, () => api.createShaderModule(device, shader.words));
      dsl = this.#vk(what, () => api.createDescriptorSetLayout(device, Array.from({ length: shader.bindings }, (_, i) => ({ binding: i }))));
      layout = this.#vk(what, () => api.createPipelineLayout(device, [dsl]));
      // Subgroup kernels want whole subgroups when the workgroup is a multiple of the largest size.
      const pipeline = this.#vk(what, () => api.createComputePipeline(device, {
        layout,
        module,
        stageFlags: full ? vk.VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT : 0,
      }));
      api.destroyShaderModule(device, module);
      const k: VkKernel = { kernel, pipeline, layout, dsl, bindings: shader.bindings, errorBinding: shader.errorBinding };
      this.#kernels.set(kernel, k);
      this.#byShader.set(key, k);
      return k;
    } catch (e) {
      if (this.#poisoned === undefined) {
        if (layout) api.destroyPipelineLayout(device, layout);
        if (dsl) api.destroyDescriptorSetLayout(device, dsl);
        if (module) api.destroyShaderModule(device, module);
      }
      throw e;
    }
  }

  record(steps: DeviceStep[]): Recording {
    return this.#record(steps, false);
  }
  #record(steps: DeviceStep[], perStep: boolean): VkRecording {
    this.#live();
    const rec = this.#vk("recording", () => buildRecording(this.#ctx, this.#cmdPool, steps, perStep, this.#allBarriers));
    this.#recordings.add(rec);
    return rec;
  }

  /** Command buffers of a recording (tests check that a budget cut the recording). */
  commandBuffers(rec: Recording): number {
    return (rec as VkRecording).cbs.length;
  }

  /** Barriers between a recording's steps (the hazards that needed one; every gap with allBarriers). */
  barriers(rec: Recording): number {
    return (rec as VkRecording).barriers;
  }

  replay(rec: Recording): void {
    this.#live();
    const r = rec as VkRecording;
    if (!this.#recordings.has(r) || r.released) throw new ExecError("vulkan: replay of a released or foreign recording");
    for (let cb = 0; cb < r.cbs.length; cb++) this.#pending.push({ rec: r, cb });
    if (!this.#inflight) this.#next();
  }

  run(steps: DeviceStep[]): void {
    this.#live();
    if (steps.length) this.replay(this.#record(steps, true));
  }

  /** Submits the next pending command buffer (the GPU starts on it while the host does other things). */
  #next(): void {
    const s = this.#pending.shift();
    if (!s) return;
    this.#submit(`replay command buffer ${s.cb + 1}/${s.rec.cbs.length}`, s.rec.submits[s.cb], this.#fence);
    this.#inflight = s;
  }

  // deno-lint-ignore require-await -- the Device interface is async: a failure here must reach the caller as a rejection
  async synchronize(timeoutMs: number): Promise<void> {
    this.#live();
    const deadline = performance.now() + timeoutMs;
    try {
      while (this.#inflight) {
        const s = this.#inflight;
        const what = `replay command buffer ${s.cb + 1}/${s.rec.cbs.length}`;
        this.#wait(what, this.#fences, Math.max(0, deadline - performance.now()), timeoutMs);
        this.#inflight = undefined;
        if (s.cb === s.rec.cbs.length - 1) s.rec.timed = true;
        this.#fault(s);
        this.#next();
      }
    } finally {
      if (this.#poisoned === undefined) this.#releaseTransients();
    }
  }

  /** Raises the first non-zero error word of the command buffer just finished (and drops the rest of the work). */
  #fault(s: Submission): void {
    const { words, stride, slotRanges, slotKernels } = s.rec;
    if (!words) return;
    const [first, end] = slotRanges[s.cb];
    let slot = -1;
    for (let i = first; i < end; i++) {
      if (words[i * stride] !== 0) {
        slot = i;
        break;
      }
    }
    if (slot < 0) return;
    const code = words[slot * stride];
    for (let i = first; i < end; i++) words[i * stride] = 0; // ready for the next replay
    // The faulting dispatch's results are void, and so is every later step that would consume them.
    this.#pending = [];
    throw new KernelFault("vulkan", slotKernels[slot], code);
  }

  #releaseTransients(): void {
    const busy = new Set<VkRecording>(this.#pending.map((p) => p.rec));
    if (this.#inflight) busy.add(this.#inflight.rec);
    for (const r of this.#recordings) {
      if (r.transient && !busy.has(r)) {
        this.#recordings.delete(r);
        releaseRecording(this.#ctx, this.#cmdPool, r);
      }
    }
  }

  /** Device µs of each step of the latest finished replay (VulkanOptions.timestamps), else undefined. */
  stepTimes(rec: Recording): StepTime[] | undefined {
    const r = rec as VkRecording, ts = this.#ctx.enabled.timestamps;
    if (!ts || !r.queries || !r.timed || r.released || this.#poisoned !== undefined) return undefined;
    const ticks = this.#vk("reading timestamps", () => this.#ctx.api.queryResults(this.#ctx.device, r.queries, 0, 2 * r.steps));
    return stepTimesOf(ticks, ts.nsPerTick, ts.validBits);
  }

  /** Heaps (with budgets where the driver reports them), memory types, and where this device's buffers live. */
  memoryReport(): MemoryReport {
    return memoryReport(this.#ctx, this.#buffers);
  }

  /** What the device offers the renderer beyond Caps (subgroup operations and sizes, timestamps). */
  get enabled(): Readonly<Enabled> {
    return this.#ctx.enabled;
  }

  releaseRecording(rec: Recording): void {
    if (this.#poisoned !== undefined) return; // leaked
    const r = rec as VkRecording;
    if (!this.#recordings.has(r)) return;
    if (this.#inflight?.rec === r || this.#pending.some((p) => p.rec === r)) {
      throw new ExecError("vulkan: releasing a recording with work still queued; synchronize first");
    }
    this.#recordings.delete(r);
    releaseRecording(this.#ctx, this.#cmdPool, r);
  }

  // deno-lint-ignore require-await -- as synchronize
  async destroy(): Promise<void> {
    const { api, device, instance } = this.#ctx;
    if (this.#poisoned !== undefined) return; // leak everything: the queue may still be running our work
    if (this.#inflight) {
      this.#pending = [];
      try {
        this.#wait("destroy", this.#fences, this.#timeoutMs);
      } catch {
        return; // poisoned now: leak
      }
      this.#inflight = undefined;
    }
    for (const r of this.#recordings) releaseRecording(this.#ctx, this.#cmdPool, r);
    this.#recordings.clear();
    for (const k of this.#byShader.values()) {
      api.destroyPipeline(device, k.pipeline);
      api.destroyPipelineLayout(device, k.layout);
      api.destroyDescriptorSetLayout(device, k.dsl);
    }
    this.#kernels.clear();
    this.#byShader.clear();
    for (const b of this.#buffers) destroyBuf(this.#ctx, b);
    this.#buffers.clear();
    if (this.#staging) destroyBuf(this.#ctx, this.#staging);
    api.destroyFence(device, this.#fence);
    api.destroyFence(device, this.#xferFence);
    api.destroyCommandPool(device, this.#cmdPool);
    api.destroyDevice(device);
    api.destroyInstance(instance);
    this.#poisoned = "destroyed";
  }
}

/** Opens the Vulkan device (see VulkanOptions). Throws LibraryNotFound without a loader, Unsupported without a usable device. */
export function openVulkanDevice(opts: VulkanOptions = {}): VulkanDevice {
  return new VulkanDevice(openContext(opts), opts);
}

/** The SPIR-V words as a string key, exactly (two shaders share a pipeline only when every word is equal). */
function wordsKey(w: Uint32Array): string {
  const u = new Uint16Array(w.buffer, w.byteOffset, w.length * 2);
  let s = "";
  for (let i = 0; i < u.length; i += 8192) s += String.fromCharCode(...u.subarray(i, i + 8192));
  return s;
}
