// The raw Vulkan backend: VulkanDevice (backends/device.ts) over ffi/vulkan.ts, kernels as SPIR-V.
import type { Device } from "../device.ts";
import { openVulkanDevice, type VulkanOptions } from "./device.ts";
export { openVulkanDevice, VulkanDevice, type VulkanOptions } from "./device.ts";
export { splitByBudget } from "./recording.ts";

/** Opens the Vulkan device, or says why there is none (the backend registry's common entry, backends/open.ts). */
export function open(opts?: VulkanOptions): Promise<Device | string> {
  try {
    return Promise.resolve(openVulkanDevice(opts));
  } catch (e) {
    return Promise.resolve(`no usable Vulkan device: ${(e as Error).message.split("\n")[0]}`);
  }
}
