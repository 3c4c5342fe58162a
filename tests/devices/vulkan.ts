// Test device registry entry for the raw Vulkan backend (lavapipe in CI, whatever the loader finds elsewhere).
// Without libvulkan or a usable device, a string saying why (the harness registers its tests as skipped).
// On a CPU driver (lavapipe) the device waits without spinning (VulkanOptions.spinMs 0): there the driver's
// threads do the work on the same cores, and a wait that polls its fence takes a core from them for as long as
// the work runs. Measured on tests/serve/scheduler.test.ts's vulkan run: 18.1 CPU-s against 28.8 with the
// default 20 ms spin (21 s against 27 s wall); as CI runs it, beside quant/families in one deno process, both on
// vulkan: 42.0 CPU-s against 66.6 (24 s against 35 s wall). tests/vulkan/device.test.ts keeps the spinning wait
// covered.
import type { Device } from "../../backends/device.ts";
import { probeBackend } from "../../backends/open.ts";

let shared: Promise<Device | string> | undefined;

/** lavapipe / llvmpipe: Mesa's software Vulkan. */
const cpuDriver = (d: Device) => /llvmpipe|lavapipe/i.test(d.target.device);

async function openShared(): Promise<Device | string> {
  const d = await probeBackend("vulkan");
  if (typeof d === "string" || !cpuDriver(d)) return d;
  await d.destroy();
  return await probeBackend("vulkan", { vulkan: { spinMs: 0 } });
}

/** A shared device for harness use, reopened if a test poisoned it; tests that poison or destroy open their own. */
export function open(): Promise<Device | string> {
  shared ??= openShared();
  return shared.then((d) => typeof d === "string" || d.poisoned === undefined ? d : (shared = openShared()));
}
