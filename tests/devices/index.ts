// The devices tests run on, by backend name. Each backend's module opens its device or says why it cannot
// (that string becomes the skip reason): js is always present; vulkan, wgpu, ptx depend on the machine.
import type { Device } from "../../backends/device.ts";
import { BUILT_BACKENDS } from "../../backends/open.ts";
import type { Backend } from "../../kernels/target.ts";

/** Every backend the build has (backends/open.ts), in the reverse of "auto"'s order: js, wgpu, vulkan, ptx. */
export const BACKENDS: readonly Backend[] = [...BUILT_BACKENDS].reverse();
export type BackendName = Backend;

/** Opens a backend's test device, or returns the reason it is absent. Never throws. */
export async function openDevice(name: BackendName): Promise<Device | string> {
  try {
    const mod = await import(`./${name}.ts`) as { open(): Promise<Device | string> };
    return await mod.open(); // each keeps one shared device per process, opened through backends/open.ts
  } catch (e) {
    return `${name}: ${(e as Error).message.split("\n")[0]}`;
  }
}

/** Backends named in POOT_BACKENDS (comma-separated), or all. */
export function selectedBackends(): BackendName[] {
  const env = (globalThis as { process?: { env: Record<string, string | undefined> } }).process?.env.POOT_BACKENDS;
  if (!env) return [...BACKENDS];
  return env.split(",").map((s) => s.trim()).filter((s): s is BackendName => (BACKENDS as readonly string[]).includes(s));
}

/**
 * Why a device skips the heavy cases (a skip reason), or false: Deno's WebGPU on a software fallback adapter
 * (llvmpipe through GL, no Vulkan driver, no subgroups) runs the big kernels for minutes, where lavapipe
 * through Vulkan takes seconds; the same kernels run on the other devices and on the small cases there.
 */
export function slowDevice(dev: Device | string): string | false {
  if (typeof dev === "string") return dev;
  const t = dev.target;
  const info = (dev as { gpu?: { adapterInfo?: { isFallbackAdapter?: boolean } } }).gpu?.adapterInfo;
  const soft = t.backend === "wgpu" && !t.caps.subgroups &&
    (info?.isFallbackAdapter === true || /llvmpipe|lavapipe|swiftshader|software|fallback/i.test(t.device));
  return soft ? `heavy case skipped on ${t.device}, a software fallback adapter without subgroups (slow)` : false;
}

/** lavapipe (or llvmpipe): a CPU's Vulkan, which the vulkan and wgpu backends both run on where it is the driver. */
export function softwareVulkan(dev: Device): boolean {
  return /llvmpipe|lavapipe/i.test(dev.target.device);
}

/**
 * The part of a list of forced variants (tunings, the cases a forced tuning takes) a device runs: every item,
 * except on a software Vulkan, where the vulkan backend takes the even items and wgpu the odd ones. There both
 * render for the same CPU JIT, whose compiles are most of CI's time on a fresh machine (a cold Mesa cache); each
 * variant still runs through one of the two renderers there, every one through the JS devices, and every one
 * through each backend on a GPU. The defaults (a case's own tuning) stay on every device. (An absent device, a
 * skip reason, takes every item: its test skips.)
 */
export function softwareShare<T>(dev: Device | string, items: readonly T[]): T[] {
  if (typeof dev === "string") return [...items];
  const b = dev.target.backend;
  if (!softwareVulkan(dev) || (b !== "vulkan" && b !== "wgpu")) return [...items];
  return items.filter((_, i) => i % 2 === (b === "vulkan" ? 0 : 1));
}
