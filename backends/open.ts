// Opens a Device by backend name, or the best one present ("auto": ptx, rocm, vulkan, wgpu, js in that order).
// Each backend's module is imported only when tried, so asking for js never loads a driver binding, and a
// backend that is absent (no library, no GPU, Bun without navigator.gpu) says why instead of throwing.
import type { Device } from "./device.ts";
import { Unsupported } from "./errors.ts";
import type { JsDeviceOptions } from "./js/device.ts";
import type { PtxDeviceOptions } from "./ptx/mod.ts";
import type { VulkanOptions } from "./vulkan/mod.ts";
import type { WgpuOptions } from "./wgpu/mod.ts";

/** A backend by name. */
export type BackendName = "ptx" | "rocm" | "vulkan" | "wgpu" | "js";
/** What a caller may ask for: one backend, or the best present. */
export type BackendChoice = BackendName | "auto";
/** The order "auto" tries them in: fastest first. */
export const BACKEND_ORDER: readonly BackendName[] = ["ptx", "rocm", "vulkan", "wgpu", "js"];

export interface OpenOptions {
  ptx?: PtxDeviceOptions;
  vulkan?: VulkanOptions;
  wgpu?: WgpuOptions;
  js?: JsDeviceOptions;
}

export function isBackendName(s: string): s is BackendName {
  return (BACKEND_ORDER as readonly string[]).includes(s);
}

/** Opens one backend's device, or returns why it is absent (or refused: a missing permission). Never throws. */
export async function probeBackend(name: BackendName, opts: OpenOptions = {}): Promise<Device | string> {
  const r = await probe(name, opts);
  // Deno without --allow-ffi says "Requires ffi access to ..."; that is a refusal, not a missing library.
  const perm = typeof r === "string" ? /Requires (\w+) access/.exec(r) : null;
  return perm ? `refused: no permission (run with --allow-${perm[1]}, or -A)` : r;
}

async function probe(name: BackendName, opts: OpenOptions): Promise<Device | string> {
  try {
    switch (name) {
      case "ptx": {
        const { probePtx } = await import("./ptx/mod.ts");
        return probePtx(opts.ptx);
      }
      case "rocm":
        return "no ROCm device in this build (backends/rocm is not written yet)";
      case "vulkan": {
        const { openVulkanDevice } = await import("./vulkan/mod.ts");
        return openVulkanDevice(opts.vulkan);
      }
      case "wgpu": {
        const { WgpuDevice } = await import("./wgpu/mod.ts");
        return await WgpuDevice.open(opts.wgpu);
      }
      case "js": {
        const { JsDevice } = await import("./js/device.ts");
        return new JsDevice(opts.js);
      }
    }
  } catch (e) {
    return (e as Error).message.split("\n")[0];
  }
}

/** What "auto" would pass over: a software rasterizer (Mesa's llvmpipe under Vulkan or WebGPU) is slower than js. */
export function passOverReason(d: Device): string | undefined {
  return /llvmpipe|lavapipe|swiftshader/i.test(d.target.device) ? `${d.target.device} is a CPU rasterizer (js is faster)` : undefined;
}

/**
 * Opens `name`'s device, or with "auto" the first of BACKEND_ORDER present, and says what it passed over
 * and why. Throws Unsupported naming each backend tried and why it is absent.
 */
export async function chooseBackend(name: BackendChoice, opts: OpenOptions = {}): Promise<{ device: Device; passedOver: string[] }> {
  if (name !== "auto" && !isBackendName(name)) {
    throw new Unsupported(`unknown backend ${name}: expected auto or one of ${BACKEND_ORDER.join(", ")}`);
  }
  const tried: string[] = [];
  for (const b of name === "auto" ? BACKEND_ORDER : [name]) {
    const d = await probeBackend(b, opts);
    if (typeof d === "string") {
      tried.push(`${b}: ${d}`);
      continue;
    }
    const why = name === "auto" && b !== "js" ? passOverReason(d) : undefined;
    if (why) {
      await d.destroy();
      tried.push(`${b}: ${why}`);
      continue;
    }
    return { device: d, passedOver: tried };
  }
  throw new Unsupported(`no ${name === "auto" ? "" : `${name} `}device: ${tried.join("; ")}`);
}

/** Opens `name`'s device, or with "auto" the first of BACKEND_ORDER present (see chooseBackend). */
export async function openBackend(name: BackendChoice, opts: OpenOptions = {}): Promise<Device> {
  return (await chooseBackend(name, opts)).device;
}
