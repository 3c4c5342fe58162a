// The raw Vulkan backend: VulkanDevice (backends/device.ts) over ffi/vulkan.ts, kernels as SPIR-V.
export { openVulkanDevice, VulkanDevice, type VulkanOptions } from "./device.ts";
export { splitByBudget } from "./recording.ts";
