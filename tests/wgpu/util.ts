// Shared helpers of the wgpu tests: the device probe (skip reason), running one kernel on any Device, and
// comparing two runs byte for byte or within a number of f32 ulps.
import { JsDevice } from "../../backends/js/device.ts";
import { WgpuDevice, type WgpuOptions } from "../../backends/wgpu/mod.ts";
import { JS_CAPS } from "../../kernels/target.ts";

/** A fresh WgpuDevice, or why there is none (Bun, no adapter): the test's skip reason. */
export async function probe(opts: WgpuOptions = {}): Promise<WgpuDevice | string> {
  return await WgpuDevice.open(opts);
}

/** What a test needs of the adapter beyond core WebGPU. */
export interface Needs {
  f16?: boolean;
  subgroups?: boolean;
  /** Storage buffers bound in one shader stage. */
  storageBuffers?: number;
}

/**
 * Why a test cannot run on this adapter (its skip reason), or false. A software fallback adapter (Deno's
 * WebGPU without a Vulkan driver: llvmpipe through GL) lacks shader-f16, subgroups and has 16 storage
 * buffers per stage; those tests skip there, naming what is missing. Under lavapipe chosen through Vulkan
 * (VK_DRIVER_FILES, as .ci/test does) nothing is skipped: that adapter has them all, and a test that finds
 * one missing fails.
 */
export function lacking(dev: WgpuDevice | string, need: Needs): string | false {
  if (typeof dev === "string") return dev;
  const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env ?? {};
  if (/lvp_icd/.test(env.VK_DRIVER_FILES ?? "")) return false;
  const caps = dev.target.caps, why: string[] = [];
  if (need.f16 && !caps.f16) why.push("shader-f16");
  if (need.subgroups && !caps.subgroups) why.push("subgroups");
  const lim = dev.gpu.limits.maxStorageBuffersPerShaderStage;
  if (need.storageBuffers && need.storageBuffers > lim) why.push(`${need.storageBuffers} storage buffers per stage (it allows ${lim})`);
  return why.length ? `the adapter (${dev.target.device}) lacks ${why.join(", ")}` : false;
}

/** A JS device with the wgpu device's subgroup size, so subgroup kernels mean the same on both. */
export function jsLike(dev: WgpuDevice | string, debug = true): JsDevice {
  const sg = typeof dev === "string" ? 8 : dev.target.caps.subgroupSize || 8;
  return new JsDevice({ debug, caps: { ...JS_CAPS, subgroups: true, subgroupSize: sg } });
}

export { runKernel } from "../kernels/harness.ts";

export function bytesOf(a: ArrayBufferView): Uint8Array {
  const n = Math.max(16, Math.ceil(a.byteLength / 16) * 16);
  const out = new Uint8Array(n);
  out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  return out;
}

/** Positions where two byte arrays differ, described by 4-byte word (at most `max`). */
export function wordDiffs(a: Uint8Array, b: Uint8Array, max = 6): string[] {
  const out: string[] = [];
  if (a.byteLength !== b.byteLength) return [`lengths ${a.byteLength} vs ${b.byteLength}`];
  const wa = new Uint32Array(a.buffer, a.byteOffset, a.byteLength >> 2), wb = new Uint32Array(b.buffer, b.byteOffset, b.byteLength >> 2);
  let n = 0;
  for (let i = 0; i < wa.length; i++) {
    if (wa[i] !== wb[i]) {
      n++;
      if (out.length < max) out.push(`word ${i}: 0x${wa[i].toString(16)} vs 0x${wb[i].toString(16)}`);
    }
  }
  if (n > out.length) out.push(`... ${n} words differ`);
  return out;
}

/** Distance in f32 ulps (NaN == NaN; +0 and -0 are 0 apart). */
export function ulps(a: number, b: number): number {
  if (Number.isNaN(a) || Number.isNaN(b)) return Number.isNaN(a) && Number.isNaN(b) ? 0 : Infinity;
  const f = new Float32Array([a, b]), u = new Int32Array(f.buffer);
  const x = u[0] < 0 ? -(u[0] & 0x7fffffff) : u[0], y = u[1] < 0 ? -(u[1] & 0x7fffffff) : u[1];
  return Math.abs(x - y);
}

/** The smallest normal f32. Vulkan and WGSL let a device flush subnormal inputs and results to zero (NVIDIA does). */
export const MIN_NORMAL = 2 ** -126;

export function isSubnormal(x: number): boolean {
  return x !== 0 && Math.abs(x) < MIN_NORMAL;
}

/** got is the zero a subnormal-flushing device gives where the exact result is subnormal. */
export function flushed(got: number, exact: number): boolean {
  return got === 0 && isSubnormal(exact);
}

/** Distance in ulps of two 16-bit float patterns (f16, or bf16 when `bf16`); NaN == NaN whatever the payload. */
export function halfUlps(a: number, b: number, bf16 = false): number {
  const inf = bf16 ? 0x7f80 : 0x7c00;
  const nanA = (a & 0x7fff) > inf, nanB = (b & 0x7fff) > inf;
  if (nanA || nanB) return nanA && nanB ? 0 : Infinity;
  const x = a & 0x8000 ? -(a & 0x7fff) : a & 0x7fff, y = b & 0x8000 ? -(b & 0x7fff) : b & 0x7fff;
  return Math.abs(x - y);
}

/**
 * Elements of two 16-bit float bindings (f16, or bf16) further apart than tol(element) ulps; with `flush`,
 * a zero where the exact f16 is subnormal passes too (at most `max` listed).
 */
export function halfDiffs(
  a: Uint8Array, b: Uint8Array, opts: { bf16?: boolean; tol?: (i: number) => number; flush?: boolean } = {}, max = 6,
): string[] {
  const ha = new Uint16Array(a.buffer, a.byteOffset, a.byteLength >> 1), hb = new Uint16Array(b.buffer, b.byteOffset, b.byteLength >> 1);
  const out: string[] = [];
  let n = 0;
  for (let i = 0; i < ha.length; i++) {
    if (halfUlps(ha[i], hb[i], opts.bf16) <= (opts.tol?.(i) ?? 0)) continue;
    if (opts.flush && !opts.bf16 && (ha[i] & 0x7fff) === 0 && (hb[i] & 0x7c00) === 0) continue;
    if (n++ < max) out.push(`[${i}] 0x${ha[i].toString(16)} vs 0x${hb[i].toString(16)}`);
  }
  if (n > out.length) out.push(`... ${n} elements differ`);
  return out;
}
