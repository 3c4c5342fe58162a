// Test device registry entry for the raw Vulkan backend (lavapipe in CI, whatever the loader finds elsewhere).
// Without libvulkan or a usable device, a string saying why (the harness registers its tests as skipped).
import type { Device } from "../../backends/device.ts";
import { openVulkanDevice, type VulkanDevice } from "../../backends/vulkan/mod.ts";

let shared: VulkanDevice | string | undefined;

/** A shared device for harness use, reopened if a test poisoned it; tests that poison or destroy open their own. */
export function open(): Promise<Device | string> {
  if (shared === undefined || (typeof shared !== "string" && shared.poisoned !== undefined)) {
    try {
      shared = openVulkanDevice();
    } catch (e) {
      shared = `no usable Vulkan device: ${(e as Error).message}`;
    }
  }
  return Promise.resolve(shared);
}
