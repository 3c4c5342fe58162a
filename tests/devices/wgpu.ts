// Test device registry entry for the wgpu backend (Deno's WebGPU). Under Bun, or without an adapter, a string
// saying why (the harness registers its tests as skipped with it).
import type { Device } from "../../backends/device.ts";
import { WgpuDevice } from "../../backends/wgpu/mod.ts";

let shared: Promise<WgpuDevice | string> | undefined;

/** A shared device for read-only harness use; tests that poison or destroy a device open their own. */
export function open(): Promise<Device | string> {
  shared ??= WgpuDevice.open();
  return shared.then((d) => typeof d === "string" || d.poisoned === undefined ? d : (shared = WgpuDevice.open()));
}
