// Test device registry entry for the wgpu backend (Deno's WebGPU). Under Bun, or without an adapter, a string
// saying why (the harness registers its tests as skipped with it).
import type { Device } from "../../backends/device.ts";
import { probeBackend } from "../../backends/open.ts";
import { slowDevice } from "./index.ts";

let shared: Promise<Device | string> | undefined;

/**
 * Deno's WebGPU over OpenGL (Linux without a Vulkan driver: mesa-vulkan-drivers absent, as on a machine where
 * .ci/run's packages are not installed) offers llvmpipe with 16 storage buffers a stage, no shader-f16 and no
 * subgroups, and hung a synchronize past 60 s in a fresh-clone run (session 25). poot's WebGPU path is built for
 * Vulkan, Metal and D3D12 adapters ("auto" passes software adapters over anyway), so its tests skip there, saying
 * why; lavapipe through Vulkan (CI) has subgroups and runs them.
 */
async function probe(): Promise<Device | string> {
  const d = await probeBackend("wgpu");
  if (typeof d === "string" || !slowDevice(d)) return d;
  await d.destroy();
  return `wgpu: ${d.target.device} is a software adapter without subgroups (WebGPU over OpenGL: no Vulkan driver installed; .ci/run installs mesa-vulkan-drivers)`;
}

/** A shared device for read-only harness use; tests that poison or destroy a device open their own. */
export function open(): Promise<Device | string> {
  shared ??= probe();
  return shared.then((d) => typeof d === "string" || d.poisoned === undefined ? d : (shared = probe()));
}
