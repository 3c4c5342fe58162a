// Opening a WebGPU device (navigator.gpu: Deno's built-in wgpu) and describing it as a TargetSet.
import { totalmem } from "node:os";
import { mappedLibraries, pinLibrariesSince } from "../../ffi/lib.ts";
import type { Caps, TargetSet } from "../../kernels/target.ts";

/** What the renderer may use on this device, beyond the TargetSet. */
export interface WgpuFeatures {
  f16: boolean;
  subgroups: boolean;
  /** `enable subgroups;` compiles (Naga in Deno 2.9 rejects the directive and needs none). */
  enableSubgroups: boolean;
  /** timestamp-query was asked for and granted (the device times every dispatch of a recording). */
  timestamps: boolean;
}

export interface WgpuOpenOptions {
  powerPreference?: "high-performance" | "low-power";
  /** Use subgroup ops / shader-f16 when the adapter offers them (default true); false tests the fallbacks. */
  subgroups?: boolean;
  f16?: boolean;
  /** Use WGSL's dot4I8Packed where the implementation has it (default true); false tests the decomposition. */
  dot4?: boolean;
  /** Ask for timestamp-query and time every dispatch (stepTimes); granted only where the adapter offers it. */
  timestamps?: boolean;
  /** Device memory to report (WebGPU does not tell); defaults to host memory on a CPU adapter, else the largest buffer. */
  memoryBytes?: number;
}

export interface Opened {
  adapter: GPUAdapter;
  device: GPUDevice;
  features: WgpuFeatures;
  target: TargetSet;
}

/** Why there is no WebGPU here, or undefined when navigator.gpu exists. */
export function webgpuMissing(): string | undefined {
  const nav = (globalThis as { navigator?: { gpu?: unknown } }).navigator;
  if (!nav?.gpu) {
    const bun = (globalThis as { Bun?: unknown }).Bun !== undefined;
    return bun ? "Bun has no navigator.gpu (WebGPU)" : "navigator.gpu (WebGPU) is not available in this runtime";
  }
  return undefined;
}

const CORE_LIMITS = [
  "maxStorageBufferBindingSize", "maxBufferSize", "maxComputeWorkgroupStorageSize", "maxComputeInvocationsPerWorkgroup",
  "maxComputeWorkgroupSizeX", "maxComputeWorkgroupSizeY", "maxComputeWorkgroupSizeZ", "maxComputeWorkgroupsPerDimension",
  "maxStorageBuffersPerShaderStage", "maxBindingsPerBindGroup", "minStorageBufferOffsetAlignment",
];

/** The adapter's own limits, every one of them (the device asks for the maximum). */
function limitsOf(a: GPUAdapter): Record<string, number> {
  const out: Record<string, number> = {};
  const l = a.limits as unknown as Record<string, number>;
  for (const k in l) if (typeof l[k] === "number") out[k] = l[k];
  return out;
}

/** Opens the adapter and a device with its maximum limits and the features poot uses; a string says why not. */
export async function openGpu(opts: WgpuOpenOptions = {}): Promise<Opened | string> {
  const missing = webgpuMissing();
  if (missing) return missing;
  const gpu = (navigator as unknown as { gpu: GPU }).gpu;
  let adapter: GPUAdapter | null;
  // The first adapter request of an isolate starts the runtime's drivers (Deno: Vulkan, and GL through EGL), which
  // it unloads again when the isolate ends: they stay loaded instead (ffi/lib.ts pinLibrariesSince).
  const before = mappedLibraries();
  try {
    adapter = await gpu.requestAdapter({ powerPreference: opts.powerPreference ?? "high-performance" });
  } catch (e) {
    return `requestAdapter failed: ${(e as Error).message}`;
  } finally {
    pinLibrariesSince(before);
  }
  if (!adapter) return "navigator.gpu offers no adapter";
  const limits = limitsOf(adapter);
  const wantF16 = (opts.f16 ?? true) && adapter.features.has("shader-f16");
  // wgpu may leave "subgroups" out of adapter.features yet grant it (lavapipe does): ask, and fall back.
  const wantSg = opts.subgroups ?? true;
  const tries: GPUFeatureName[][] = [];
  const base: GPUFeatureName[] = wantF16 ? ["shader-f16"] : [];
  if (opts.timestamps && adapter.features.has("timestamp-query")) base.push("timestamp-query");
  if (wantSg) tries.push([...base, "subgroups" as GPUFeatureName]);
  tries.push(base);
  let device: GPUDevice | undefined;
  let lastErr = "";
  // Every limit the adapter lists, at its maximum; should a runtime refuse one of them, the ones poot relies on.
  const core = Object.fromEntries(CORE_LIMITS.filter((k) => k in limits).map((k) => [k, limits[k]]));
  for (const requiredFeatures of tries) {
    for (const requiredLimits of [limits, core, {}]) {
      try {
        device = await adapter.requestDevice({ requiredFeatures, requiredLimits });
        break;
      } catch (e) {
        lastErr = (e as Error).message;
      }
    }
    if (device) break;
  }
  if (!device) return `requestDevice failed: ${lastErr}`;
  const info = adapter.info as GPUAdapterInfo & { subgroupMinSize?: number; subgroupMaxSize?: number; isFallbackAdapter?: boolean };
  const sgMin = info.subgroupMinSize ?? 0, sgMax = info.subgroupMaxSize ?? 0;
  // Kernels assume one subgroup size; WebGPU cannot pin it, so a varying size counts as no subgroups.
  const subgroups = device.features.has("subgroups" as GPUFeatureName) && sgMin > 0 && sgMin === sgMax;
  const f16 = device.features.has("shader-f16");
  const enableSubgroups = subgroups ? await compiles(device, "enable subgroups;\n@compute @workgroup_size(1) fn main() {}") : false;
  const dot4Native = (opts.dot4 ?? true) && gpu.wgslLanguageFeatures?.has("packed_4x8_integer_dot_product") === true &&
    await compiles(device, DOT4_PROBE);
  const dl = device.limits;
  const name = info.description || [info.vendor, info.architecture, info.device].filter(Boolean).join(" ") || "WebGPU adapter";
  const fallback = info.isFallbackAdapter === true || /llvmpipe|lavapipe|swiftshader|warp/i.test(name);
  const caps: Caps = {
    subgroups,
    subgroupSize: subgroups ? sgMin : 0,
    f16,
    storage16: false,
    storage8: false,
    trap: false,
    maxWorkgroupSize: dl.maxComputeInvocationsPerWorkgroup,
    maxWorkgroupsPerDim: [dl.maxComputeWorkgroupsPerDimension, dl.maxComputeWorkgroupsPerDimension, dl.maxComputeWorkgroupsPerDimension],
    maxSharedBytes: dl.maxComputeWorkgroupStorageSize,
    maxBindingBytes: Math.min(dl.maxStorageBufferBindingSize, dl.maxBufferSize),
    maxStorageBuffers: dl.maxStorageBuffersPerShaderStage,
    bindingAlign: Math.max(16, dl.minStorageBufferOffsetAlignment),
    // each dependent dispatch costs ~10 µs on the H200 (wgpu's barriers between passes/dispatches)
    dispatchGap: true,
    dot4Native,
    // WebGPU tells no "accelerated" bit. Naga writes dot4I8Packed as OpSDot where the Vulkan device enables
    // integer dot products (every GPU with dp4a-class hardware), so a GPU adapter defaults the integer gemv on,
    // as Vulkan does on NVIDIA; a CPU adapter (lavapipe, SwiftShader, WARP) keeps the float path.
    dot4: dot4Native && !fallback,
  };
  const target: TargetSet = {
    backend: "wgpu",
    device: name,
    caps,
    memory: { totalBytes: opts.memoryBytes ?? (fallback ? totalmem() : dl.maxBufferSize) },
    watchdogBudget: 0,
  };
  const timestamps = device.features.has("timestamp-query");
  return { adapter, device, features: { f16, subgroups, enableSubgroups, timestamps }, target };
}

/** dot4I8Packed as the WGSL renderer writes it: trusted only where such a module compiles. */
const DOT4_PROBE = `requires packed_4x8_integer_dot_product;
@group(0) @binding(0) var<storage, read_write> y: array<u32>;
@compute @workgroup_size(1) fn main() { y[0] = bitcast<u32>(dot4I8Packed(y[1], y[2])); }`;

async function compiles(device: GPUDevice, code: string): Promise<boolean> {
  device.pushErrorScope("validation");
  const m = device.createShaderModule({ code });
  const info = await m.getCompilationInfo();
  const err = await device.popErrorScope();
  return !err && !info.messages.some((x) => x.type === "error");
}
