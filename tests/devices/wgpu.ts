// Test device registry entry for the wgpu backend (Deno's WebGPU). Under Bun, or without an adapter, a string
// saying why (the harness registers its tests as skipped with it).
import type { Device } from "../../backends/device.ts";
import { probeBackend } from "../../backends/open.ts";

let shared: Promise<Device | string> | undefined;

/** A shared device for read-only harness use; tests that poison or destroy a device open their own. */
export function open(): Promise<Device | string> {
  shared ??= probeBackend("wgpu");
  return shared.then((d) => typeof d === "string" || d.poisoned === undefined ? d : (shared = probeBackend("wgpu")));
}
