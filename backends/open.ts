// Opens a Device by backend name, or the best one present ("auto": ptx, rocm, vulkan, wgpu, js in that order).
// The one way to open a device: every backend folder's mod.ts exports `open(opts)`, which returns the Device or
// says why it is absent (no library, no GPU, Bun without navigator.gpu) instead of throwing. Each backend's
// module is imported only when tried, so asking for js never loads a driver binding. A new backend is its
// folder plus one line in BACKEND_MODULES (and its name in kernels/target.ts BACKENDS).
import type { Device } from "./device.ts";
import { Unsupported } from "./errors.ts";
import type { JsDeviceOptions } from "./js/mod.ts";
import type { PtxDeviceOptions } from "./ptx/mod.ts";
import type { RocmOptions } from "./rocm/options.ts";
import type { VulkanOptions } from "./vulkan/mod.ts";
import type { WgpuOptions } from "./wgpu/mod.ts";
import { type Backend, BACKENDS } from "../kernels/target.ts";

/** A backend by name. */
export type BackendName = Backend;
/** What a caller may ask for: one backend, or the best present. */
export type BackendChoice = BackendName | "auto";
/** The order "auto" tries them in: fastest first (kernels/target.ts BACKENDS). */
export const BACKEND_ORDER: readonly BackendName[] = BACKENDS;

export interface OpenOptions {
  ptx?: PtxDeviceOptions;
  rocm?: RocmOptions;
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

/** What each backend folder's mod.ts exports. */
interface BackendModule {
  open(opts?: unknown): Promise<Device | string>;
}

/** Each backend's module, imported when first tried, or why the build has none. */
const BACKEND_MODULES: Record<BackendName, (() => Promise<BackendModule>) | string> = {
  ptx: () => import("./ptx/mod.ts") as Promise<BackendModule>,
  rocm: () => import("./rocm/mod.ts") as Promise<BackendModule>,
  vulkan: () => import("./vulkan/mod.ts") as Promise<BackendModule>,
  wgpu: () => import("./wgpu/mod.ts") as Promise<BackendModule>,
  js: () => import("./js/mod.ts") as Promise<BackendModule>,
};

/** The backends this build has a module for (in BACKEND_ORDER). */
export const BUILT_BACKENDS: readonly BackendName[] = BACKEND_ORDER.filter((b) => typeof BACKEND_MODULES[b] !== "string");

async function probe(name: BackendName, opts: OpenOptions): Promise<Device | string> {
  const load = BACKEND_MODULES[name];
  if (typeof load === "string") return load;
  try {
    return await (await load()).open(opts[name as keyof OpenOptions]);
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
