// Test device registry entry for the raw Vulkan backend (lavapipe in CI, whatever the loader finds elsewhere).
// Without libvulkan or a usable device, a string saying why (the harness registers its tests as skipped).
// On a CPU driver (lavapipe) the device waits without spinning (the backend's default there, VulkanOptions.spinMs);
// tests/vulkan/device.test.ts keeps the spinning wait covered.
import type { Device } from "../../backends/device.ts";
import { probeBackend } from "../../backends/open.ts";

let shared: Promise<Device | string> | undefined;

/** A shared device for harness use, reopened if a test poisoned it; tests that poison or destroy open their own. */
export function open(): Promise<Device | string> {
  shared ??= probeBackend("vulkan");
  return shared.then((d) => typeof d === "string" || d.poisoned === undefined ? d : (shared = probeBackend("vulkan")));
}
