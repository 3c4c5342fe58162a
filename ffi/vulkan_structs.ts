// Vulkan struct layouts (vulkan_core.h, LP64) for everything ffi/vulkan.ts passes or reads. Each struct with
// an sType has it as a default, so pack(VkBufferCreateInfo, {size, usage}) is a complete create-info.
// Field names are the C names; handles are "u64", Bool32 and enums "u32". tests/ffi/offsets.c checks them.

import { array, chars, struct } from "./layout.ts";

export const VkApplicationInfo = struct("VkApplicationInfo", {
  sType: "u32", pNext: "pointer", pApplicationName: "pointer", applicationVersion: "u32", pEngineName: "pointer",
  engineVersion: "u32", apiVersion: "u32",
}, { defaults: { sType: 0 } });
export const VkInstanceCreateInfo = struct("VkInstanceCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", pApplicationInfo: "pointer", enabledLayerCount: "u32",
  ppEnabledLayerNames: "pointer", enabledExtensionCount: "u32", ppEnabledExtensionNames: "pointer",
}, { defaults: { sType: 1 } });
export const VkExtensionProperties = struct("VkExtensionProperties", {
  extensionName: chars(256), specVersion: "u32",
});
export const VkDeviceQueueCreateInfo = struct("VkDeviceQueueCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", queueFamilyIndex: "u32", queueCount: "u32",
  pQueuePriorities: "pointer",
}, { defaults: { sType: 2 } });
export const VkDeviceCreateInfo = struct("VkDeviceCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", queueCreateInfoCount: "u32", pQueueCreateInfos: "pointer",
  enabledLayerCount: "u32", ppEnabledLayerNames: "pointer", enabledExtensionCount: "u32",
  ppEnabledExtensionNames: "pointer", pEnabledFeatures: "pointer",
}, { defaults: { sType: 3 } });
export const VkPhysicalDeviceLimits = struct("VkPhysicalDeviceLimits", {
  maxImageDimension1D: "u32", maxImageDimension2D: "u32", maxImageDimension3D: "u32", maxImageDimensionCube: "u32",
  maxImageArrayLayers: "u32", maxTexelBufferElements: "u32", maxUniformBufferRange: "u32",
  maxStorageBufferRange: "u32", maxPushConstantsSize: "u32", maxMemoryAllocationCount: "u32",
  maxSamplerAllocationCount: "u32", bufferImageGranularity: "u64", sparseAddressSpaceSize: "u64",
  maxBoundDescriptorSets: "u32", maxPerStageDescriptorSamplers: "u32", maxPerStageDescriptorUniformBuffers: "u32",
  maxPerStageDescriptorStorageBuffers: "u32", maxPerStageDescriptorSampledImages: "u32",
  maxPerStageDescriptorStorageImages: "u32", maxPerStageDescriptorInputAttachments: "u32",
  maxPerStageResources: "u32", maxDescriptorSetSamplers: "u32", maxDescriptorSetUniformBuffers: "u32",
  maxDescriptorSetUniformBuffersDynamic: "u32", maxDescriptorSetStorageBuffers: "u32",
  maxDescriptorSetStorageBuffersDynamic: "u32", maxDescriptorSetSampledImages: "u32",
  maxDescriptorSetStorageImages: "u32", maxDescriptorSetInputAttachments: "u32", maxVertexInputAttributes: "u32",
  maxVertexInputBindings: "u32", maxVertexInputAttributeOffset: "u32", maxVertexInputBindingStride: "u32",
  maxVertexOutputComponents: "u32", maxTessellationGenerationLevel: "u32", maxTessellationPatchSize: "u32",
  maxTessellationControlPerVertexInputComponents: "u32", maxTessellationControlPerVertexOutputComponents: "u32",
  maxTessellationControlPerPatchOutputComponents: "u32", maxTessellationControlTotalOutputComponents: "u32",
  maxTessellationEvaluationInputComponents: "u32", maxTessellationEvaluationOutputComponents: "u32",
  maxGeometryShaderInvocations: "u32", maxGeometryInputComponents: "u32", maxGeometryOutputComponents: "u32",
  maxGeometryOutputVertices: "u32", maxGeometryTotalOutputComponents: "u32", maxFragmentInputComponents: "u32",
  maxFragmentOutputAttachments: "u32", maxFragmentDualSrcAttachments: "u32",
  maxFragmentCombinedOutputResources: "u32", maxComputeSharedMemorySize: "u32",
  maxComputeWorkGroupCount: array("u32", 3), maxComputeWorkGroupInvocations: "u32",
  maxComputeWorkGroupSize: array("u32", 3), subPixelPrecisionBits: "u32", subTexelPrecisionBits: "u32",
  mipmapPrecisionBits: "u32", maxDrawIndexedIndexValue: "u32", maxDrawIndirectCount: "u32", maxSamplerLodBias: "f32",
  maxSamplerAnisotropy: "f32", maxViewports: "u32", maxViewportDimensions: array("u32", 2),
  viewportBoundsRange: array("f32", 2), viewportSubPixelBits: "u32", minMemoryMapAlignment: "usize",
  minTexelBufferOffsetAlignment: "u64", minUniformBufferOffsetAlignment: "u64",
  minStorageBufferOffsetAlignment: "u64", minTexelOffset: "i32", maxTexelOffset: "u32", minTexelGatherOffset: "i32",
  maxTexelGatherOffset: "u32", minInterpolationOffset: "f32", maxInterpolationOffset: "f32",
  subPixelInterpolationOffsetBits: "u32", maxFramebufferWidth: "u32", maxFramebufferHeight: "u32",
  maxFramebufferLayers: "u32", framebufferColorSampleCounts: "u32", framebufferDepthSampleCounts: "u32",
  framebufferStencilSampleCounts: "u32", framebufferNoAttachmentsSampleCounts: "u32", maxColorAttachments: "u32",
  sampledImageColorSampleCounts: "u32", sampledImageIntegerSampleCounts: "u32", sampledImageDepthSampleCounts: "u32",
  sampledImageStencilSampleCounts: "u32", storageImageSampleCounts: "u32", maxSampleMaskWords: "u32",
  timestampComputeAndGraphics: "u32", timestampPeriod: "f32", maxClipDistances: "u32", maxCullDistances: "u32",
  maxCombinedClipAndCullDistances: "u32", discreteQueuePriorities: "u32", pointSizeRange: array("f32", 2),
  lineWidthRange: array("f32", 2), pointSizeGranularity: "f32", lineWidthGranularity: "f32", strictLines: "u32",
  standardSampleLocations: "u32", optimalBufferCopyOffsetAlignment: "u64", optimalBufferCopyRowPitchAlignment: "u64",
  nonCoherentAtomSize: "u64",
});
export const VkPhysicalDeviceSparseProperties = struct("VkPhysicalDeviceSparseProperties", {
  residencyStandard2DBlockShape: "u32", residencyStandard2DMultisampleBlockShape: "u32",
  residencyStandard3DBlockShape: "u32", residencyAlignedMipSize: "u32", residencyNonResidentStrict: "u32",
});
export const VkPhysicalDeviceProperties = struct("VkPhysicalDeviceProperties", {
  apiVersion: "u32", driverVersion: "u32", vendorID: "u32", deviceID: "u32", deviceType: "u32",
  deviceName: chars(256), pipelineCacheUUID: array("u8", 16), limits: VkPhysicalDeviceLimits,
  sparseProperties: VkPhysicalDeviceSparseProperties,
});
export const VkPhysicalDeviceFeatures = struct("VkPhysicalDeviceFeatures", {
  robustBufferAccess: "u32", fullDrawIndexUint32: "u32", imageCubeArray: "u32", independentBlend: "u32",
  geometryShader: "u32", tessellationShader: "u32", sampleRateShading: "u32", dualSrcBlend: "u32", logicOp: "u32",
  multiDrawIndirect: "u32", drawIndirectFirstInstance: "u32", depthClamp: "u32", depthBiasClamp: "u32",
  fillModeNonSolid: "u32", depthBounds: "u32", wideLines: "u32", largePoints: "u32", alphaToOne: "u32",
  multiViewport: "u32", samplerAnisotropy: "u32", textureCompressionETC2: "u32", textureCompressionASTC_LDR: "u32",
  textureCompressionBC: "u32", occlusionQueryPrecise: "u32", pipelineStatisticsQuery: "u32",
  vertexPipelineStoresAndAtomics: "u32", fragmentStoresAndAtomics: "u32",
  shaderTessellationAndGeometryPointSize: "u32", shaderImageGatherExtended: "u32",
  shaderStorageImageExtendedFormats: "u32", shaderStorageImageMultisample: "u32",
  shaderStorageImageReadWithoutFormat: "u32", shaderStorageImageWriteWithoutFormat: "u32",
  shaderUniformBufferArrayDynamicIndexing: "u32", shaderSampledImageArrayDynamicIndexing: "u32",
  shaderStorageBufferArrayDynamicIndexing: "u32", shaderStorageImageArrayDynamicIndexing: "u32",
  shaderClipDistance: "u32", shaderCullDistance: "u32", shaderFloat64: "u32", shaderInt64: "u32", shaderInt16: "u32",
  shaderResourceResidency: "u32", shaderResourceMinLod: "u32", sparseBinding: "u32", sparseResidencyBuffer: "u32",
  sparseResidencyImage2D: "u32", sparseResidencyImage3D: "u32", sparseResidency2Samples: "u32",
  sparseResidency4Samples: "u32", sparseResidency8Samples: "u32", sparseResidency16Samples: "u32",
  sparseResidencyAliased: "u32", variableMultisampleRate: "u32", inheritedQueries: "u32",
});
export const VkExtent3D = struct("VkExtent3D", {
  width: "u32", height: "u32", depth: "u32",
});
export const VkQueueFamilyProperties = struct("VkQueueFamilyProperties", {
  queueFlags: "u32", queueCount: "u32", timestampValidBits: "u32", minImageTransferGranularity: VkExtent3D,
});
export const VkMemoryType = struct("VkMemoryType", {
  propertyFlags: "u32", heapIndex: "u32",
});
export const VkMemoryHeap = struct("VkMemoryHeap", {
  size: "u64", flags: "u32",
});
export const VkPhysicalDeviceMemoryProperties = struct("VkPhysicalDeviceMemoryProperties", {
  memoryTypeCount: "u32", memoryTypes: array(VkMemoryType, 32), memoryHeapCount: "u32",
  memoryHeaps: array(VkMemoryHeap, 16),
});
export const VkPhysicalDeviceFeatures2 = struct("VkPhysicalDeviceFeatures2", {
  sType: "u32", pNext: "pointer", features: VkPhysicalDeviceFeatures,
}, { defaults: { sType: 1000059000 } });
export const VkPhysicalDeviceProperties2 = struct("VkPhysicalDeviceProperties2", {
  sType: "u32", pNext: "pointer", properties: VkPhysicalDeviceProperties,
}, { defaults: { sType: 1000059001 } });
export const VkPhysicalDeviceMemoryProperties2 = struct("VkPhysicalDeviceMemoryProperties2", {
  sType: "u32", pNext: "pointer", memoryProperties: VkPhysicalDeviceMemoryProperties,
}, { defaults: { sType: 1000059006 } });
export const VkPhysicalDeviceSubgroupProperties = struct("VkPhysicalDeviceSubgroupProperties", {
  sType: "u32", pNext: "pointer", subgroupSize: "u32", supportedStages: "u32", supportedOperations: "u32",
  quadOperationsInAllStages: "u32",
}, { defaults: { sType: 1000094000 } });
export const VkPhysicalDeviceSubgroupSizeControlProperties = struct("VkPhysicalDeviceSubgroupSizeControlProperties", {
  sType: "u32", pNext: "pointer", minSubgroupSize: "u32", maxSubgroupSize: "u32", maxComputeWorkgroupSubgroups: "u32",
  requiredSubgroupSizeStages: "u32",
}, { defaults: { sType: 1000225000 } });
export const VkPhysicalDeviceSubgroupSizeControlFeatures = struct("VkPhysicalDeviceSubgroupSizeControlFeatures", {
  sType: "u32", pNext: "pointer", subgroupSizeControl: "u32", computeFullSubgroups: "u32",
}, { defaults: { sType: 1000225002 } });
export const VkPhysicalDevice16BitStorageFeatures = struct("VkPhysicalDevice16BitStorageFeatures", {
  sType: "u32", pNext: "pointer", storageBuffer16BitAccess: "u32", uniformAndStorageBuffer16BitAccess: "u32",
  storagePushConstant16: "u32", storageInputOutput16: "u32",
}, { defaults: { sType: 1000083000 } });
export const VkPhysicalDevice8BitStorageFeatures = struct("VkPhysicalDevice8BitStorageFeatures", {
  sType: "u32", pNext: "pointer", storageBuffer8BitAccess: "u32", uniformAndStorageBuffer8BitAccess: "u32",
  storagePushConstant8: "u32",
}, { defaults: { sType: 1000177000 } });
export const VkPhysicalDeviceShaderFloat16Int8Features = struct("VkPhysicalDeviceShaderFloat16Int8Features", {
  sType: "u32", pNext: "pointer", shaderFloat16: "u32", shaderInt8: "u32",
}, { defaults: { sType: 1000082000 } });
export const VkPhysicalDeviceShaderIntegerDotProductFeatures = struct("VkPhysicalDeviceShaderIntegerDotProductFeatures", {
  sType: "u32", pNext: "pointer", shaderIntegerDotProduct: "u32",
}, { defaults: { sType: 1000280000 } });
// Which integer dot products the driver runs faster than the same arithmetic written out (Vulkan 1.3 core,
// VK_KHR_shader_integer_dot_product before it).
export const VkPhysicalDeviceShaderIntegerDotProductProperties = struct("VkPhysicalDeviceShaderIntegerDotProductProperties", {
  sType: "u32", pNext: "pointer", integerDotProduct8BitUnsignedAccelerated: "u32",
  integerDotProduct8BitSignedAccelerated: "u32", integerDotProduct8BitMixedSignednessAccelerated: "u32",
  integerDotProduct4x8BitPackedUnsignedAccelerated: "u32", integerDotProduct4x8BitPackedSignedAccelerated: "u32",
  integerDotProduct4x8BitPackedMixedSignednessAccelerated: "u32", integerDotProduct16BitUnsignedAccelerated: "u32",
  integerDotProduct16BitSignedAccelerated: "u32", integerDotProduct16BitMixedSignednessAccelerated: "u32",
  integerDotProduct32BitUnsignedAccelerated: "u32", integerDotProduct32BitSignedAccelerated: "u32",
  integerDotProduct32BitMixedSignednessAccelerated: "u32", integerDotProduct64BitUnsignedAccelerated: "u32",
  integerDotProduct64BitSignedAccelerated: "u32", integerDotProduct64BitMixedSignednessAccelerated: "u32",
  integerDotProductAccumulatingSaturating8BitUnsignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating8BitSignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating8BitMixedSignednessAccelerated: "u32",
  integerDotProductAccumulatingSaturating4x8BitPackedUnsignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating4x8BitPackedSignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating4x8BitPackedMixedSignednessAccelerated: "u32",
  integerDotProductAccumulatingSaturating16BitUnsignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating16BitSignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating16BitMixedSignednessAccelerated: "u32",
  integerDotProductAccumulatingSaturating32BitUnsignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating32BitSignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating32BitMixedSignednessAccelerated: "u32",
  integerDotProductAccumulatingSaturating64BitUnsignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating64BitSignedAccelerated: "u32",
  integerDotProductAccumulatingSaturating64BitMixedSignednessAccelerated: "u32",
}, { defaults: { sType: 1000280001 } });
// The Vulkan memory model (core in 1.2, VK_KHR_vulkan_memory_model before it): the model cooperative-matrix
// shaders declare. A struct of its own because the device chain holds the 1.2 features one by one.
export const VkPhysicalDeviceVulkanMemoryModelFeatures = struct("VkPhysicalDeviceVulkanMemoryModelFeatures", {
  sType: "u32", pNext: "pointer", vulkanMemoryModel: "u32", vulkanMemoryModelDeviceScope: "u32",
  vulkanMemoryModelAvailabilityVisibilityChains: "u32",
}, { defaults: { sType: 1000211000 } });
export const VkPhysicalDeviceCooperativeMatrixFeaturesKHR = struct("VkPhysicalDeviceCooperativeMatrixFeaturesKHR", {
  sType: "u32", pNext: "pointer", cooperativeMatrix: "u32", cooperativeMatrixRobustBufferAccess: "u32",
}, { defaults: { sType: 1000506000 } });
export const VkPhysicalDeviceShaderBfloat16FeaturesKHR = struct("VkPhysicalDeviceShaderBfloat16FeaturesKHR", {
  sType: "u32", pNext: "pointer", shaderBFloat16Type: "u32", shaderBFloat16DotProduct: "u32",
  shaderBFloat16CooperativeMatrix: "u32",
}, { defaults: { sType: 1000141000 } });
// One matrix shape and type combination the device runs (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR).
export const VkCooperativeMatrixPropertiesKHR = struct("VkCooperativeMatrixPropertiesKHR", {
  sType: "u32", pNext: "pointer", MSize: "u32", NSize: "u32", KSize: "u32", AType: "u32", BType: "u32", CType: "u32",
  ResultType: "u32", saturatingAccumulation: "u32", scope: "u32",
}, { defaults: { sType: 1000506001 } });
export const VkPhysicalDeviceTimelineSemaphoreFeatures = struct("VkPhysicalDeviceTimelineSemaphoreFeatures", {
  sType: "u32", pNext: "pointer", timelineSemaphore: "u32",
}, { defaults: { sType: 1000207000 } });
export const VkPhysicalDeviceRobustness2FeaturesEXT = struct("VkPhysicalDeviceRobustness2FeaturesEXT", {
  sType: "u32", pNext: "pointer", robustBufferAccess2: "u32", robustImageAccess2: "u32", nullDescriptor: "u32",
}, { defaults: { sType: 1000286000 } });
export const VkPhysicalDeviceVulkan11Features = struct("VkPhysicalDeviceVulkan11Features", {
  sType: "u32", pNext: "pointer", storageBuffer16BitAccess: "u32", uniformAndStorageBuffer16BitAccess: "u32",
  storagePushConstant16: "u32", storageInputOutput16: "u32", multiview: "u32", multiviewGeometryShader: "u32",
  multiviewTessellationShader: "u32", variablePointersStorageBuffer: "u32", variablePointers: "u32",
  protectedMemory: "u32", samplerYcbcrConversion: "u32", shaderDrawParameters: "u32",
}, { defaults: { sType: 49 } });
export const VkPhysicalDeviceVulkan12Features = struct("VkPhysicalDeviceVulkan12Features", {
  sType: "u32", pNext: "pointer", samplerMirrorClampToEdge: "u32", drawIndirectCount: "u32",
  storageBuffer8BitAccess: "u32", uniformAndStorageBuffer8BitAccess: "u32", storagePushConstant8: "u32",
  shaderBufferInt64Atomics: "u32", shaderSharedInt64Atomics: "u32", shaderFloat16: "u32", shaderInt8: "u32",
  descriptorIndexing: "u32", shaderInputAttachmentArrayDynamicIndexing: "u32",
  shaderUniformTexelBufferArrayDynamicIndexing: "u32", shaderStorageTexelBufferArrayDynamicIndexing: "u32",
  shaderUniformBufferArrayNonUniformIndexing: "u32", shaderSampledImageArrayNonUniformIndexing: "u32",
  shaderStorageBufferArrayNonUniformIndexing: "u32", shaderStorageImageArrayNonUniformIndexing: "u32",
  shaderInputAttachmentArrayNonUniformIndexing: "u32", shaderUniformTexelBufferArrayNonUniformIndexing: "u32",
  shaderStorageTexelBufferArrayNonUniformIndexing: "u32", descriptorBindingUniformBufferUpdateAfterBind: "u32",
  descriptorBindingSampledImageUpdateAfterBind: "u32", descriptorBindingStorageImageUpdateAfterBind: "u32",
  descriptorBindingStorageBufferUpdateAfterBind: "u32", descriptorBindingUniformTexelBufferUpdateAfterBind: "u32",
  descriptorBindingStorageTexelBufferUpdateAfterBind: "u32", descriptorBindingUpdateUnusedWhilePending: "u32",
  descriptorBindingPartiallyBound: "u32", descriptorBindingVariableDescriptorCount: "u32",
  runtimeDescriptorArray: "u32", samplerFilterMinmax: "u32", scalarBlockLayout: "u32", imagelessFramebuffer: "u32",
  uniformBufferStandardLayout: "u32", shaderSubgroupExtendedTypes: "u32", separateDepthStencilLayouts: "u32",
  hostQueryReset: "u32", timelineSemaphore: "u32", bufferDeviceAddress: "u32",
  bufferDeviceAddressCaptureReplay: "u32", bufferDeviceAddressMultiDevice: "u32", vulkanMemoryModel: "u32",
  vulkanMemoryModelDeviceScope: "u32", vulkanMemoryModelAvailabilityVisibilityChains: "u32",
  shaderOutputViewportIndex: "u32", shaderOutputLayer: "u32", subgroupBroadcastDynamicId: "u32",
}, { defaults: { sType: 51 } });
export const VkPhysicalDeviceVulkan13Features = struct("VkPhysicalDeviceVulkan13Features", {
  sType: "u32", pNext: "pointer", robustImageAccess: "u32", inlineUniformBlock: "u32",
  descriptorBindingInlineUniformBlockUpdateAfterBind: "u32", pipelineCreationCacheControl: "u32", privateData: "u32",
  shaderDemoteToHelperInvocation: "u32", shaderTerminateInvocation: "u32", subgroupSizeControl: "u32",
  computeFullSubgroups: "u32", synchronization2: "u32", textureCompressionASTC_HDR: "u32",
  shaderZeroInitializeWorkgroupMemory: "u32", dynamicRendering: "u32", shaderIntegerDotProduct: "u32",
  maintenance4: "u32",
}, { defaults: { sType: 53 } });
export const VkConformanceVersion = struct("VkConformanceVersion", {
  major: "u8", minor: "u8", subminor: "u8", patch: "u8",
});
export const VkPhysicalDeviceDriverProperties = struct("VkPhysicalDeviceDriverProperties", {
  sType: "u32", pNext: "pointer", driverID: "u32", driverName: chars(256), driverInfo: chars(256),
  conformanceVersion: VkConformanceVersion,
}, { defaults: { sType: 1000196000 } });
export const VkPhysicalDeviceMemoryBudgetPropertiesEXT = struct("VkPhysicalDeviceMemoryBudgetPropertiesEXT", {
  sType: "u32", pNext: "pointer", heapBudget: array("u64", 16), heapUsage: array("u64", 16),
}, { defaults: { sType: 1000237000 } });
export const VkSubmitInfo = struct("VkSubmitInfo", {
  sType: "u32", pNext: "pointer", waitSemaphoreCount: "u32", pWaitSemaphores: "pointer", pWaitDstStageMask: "pointer",
  commandBufferCount: "u32", pCommandBuffers: "pointer", signalSemaphoreCount: "u32", pSignalSemaphores: "pointer",
}, { defaults: { sType: 4 } });
export const VkTimelineSemaphoreSubmitInfo = struct("VkTimelineSemaphoreSubmitInfo", {
  sType: "u32", pNext: "pointer", waitSemaphoreValueCount: "u32", pWaitSemaphoreValues: "pointer",
  signalSemaphoreValueCount: "u32", pSignalSemaphoreValues: "pointer",
}, { defaults: { sType: 1000207003 } });
export const VkMemoryAllocateInfo = struct("VkMemoryAllocateInfo", {
  sType: "u32", pNext: "pointer", allocationSize: "u64", memoryTypeIndex: "u32",
}, { defaults: { sType: 5 } });
export const VkMemoryAllocateFlagsInfo = struct("VkMemoryAllocateFlagsInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", deviceMask: "u32",
}, { defaults: { sType: 1000060000 } });
export const VkMappedMemoryRange = struct("VkMappedMemoryRange", {
  sType: "u32", pNext: "pointer", memory: "u64", offset: "u64", size: "u64",
}, { defaults: { sType: 6 } });
export const VkMemoryRequirements = struct("VkMemoryRequirements", {
  size: "u64", alignment: "u64", memoryTypeBits: "u32",
});
export const VkFenceCreateInfo = struct("VkFenceCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32",
}, { defaults: { sType: 8 } });
export const VkSemaphoreCreateInfo = struct("VkSemaphoreCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32",
}, { defaults: { sType: 9 } });
export const VkSemaphoreTypeCreateInfo = struct("VkSemaphoreTypeCreateInfo", {
  sType: "u32", pNext: "pointer", semaphoreType: "u32", initialValue: "u64",
}, { defaults: { sType: 1000207002 } });
export const VkSemaphoreWaitInfo = struct("VkSemaphoreWaitInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", semaphoreCount: "u32", pSemaphores: "pointer", pValues: "pointer",
}, { defaults: { sType: 1000207004 } });
export const VkSemaphoreSignalInfo = struct("VkSemaphoreSignalInfo", {
  sType: "u32", pNext: "pointer", semaphore: "u64", value: "u64",
}, { defaults: { sType: 1000207005 } });
export const VkQueryPoolCreateInfo = struct("VkQueryPoolCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", queryType: "u32", queryCount: "u32", pipelineStatistics: "u32",
}, { defaults: { sType: 11 } });
export const VkBufferCreateInfo = struct("VkBufferCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", size: "u64", usage: "u32", sharingMode: "u32",
  queueFamilyIndexCount: "u32", pQueueFamilyIndices: "pointer",
}, { defaults: { sType: 12 } });
export const VkBufferDeviceAddressInfo = struct("VkBufferDeviceAddressInfo", {
  sType: "u32", pNext: "pointer", buffer: "u64",
}, { defaults: { sType: 1000244001 } });
export const VkShaderModuleCreateInfo = struct("VkShaderModuleCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", codeSize: "usize", pCode: "pointer",
}, { defaults: { sType: 16 } });
export const VkSpecializationMapEntry = struct("VkSpecializationMapEntry", {
  constantID: "u32", offset: "u32", size: "usize",
});
export const VkSpecializationInfo = struct("VkSpecializationInfo", {
  mapEntryCount: "u32", pMapEntries: "pointer", dataSize: "usize", pData: "pointer",
});
export const VkPipelineShaderStageCreateInfo = struct("VkPipelineShaderStageCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", stage: "u32", module: "u64", pName: "pointer",
  pSpecializationInfo: "pointer",
}, { defaults: { sType: 18 } });
export const VkPipelineShaderStageRequiredSubgroupSizeCreateInfo = struct("VkPipelineShaderStageRequiredSubgroupSizeCreateInfo", {
  sType: "u32", pNext: "pointer", requiredSubgroupSize: "u32",
}, { defaults: { sType: 1000225001 } });
export const VkComputePipelineCreateInfo = struct("VkComputePipelineCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", stage: VkPipelineShaderStageCreateInfo, layout: "u64",
  basePipelineHandle: "u64", basePipelineIndex: "i32",
}, { defaults: { sType: 29 } });
export const VkPushConstantRange = struct("VkPushConstantRange", {
  stageFlags: "u32", offset: "u32", size: "u32",
});
export const VkPipelineLayoutCreateInfo = struct("VkPipelineLayoutCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", setLayoutCount: "u32", pSetLayouts: "pointer",
  pushConstantRangeCount: "u32", pPushConstantRanges: "pointer",
}, { defaults: { sType: 30 } });
export const VkDescriptorSetLayoutBinding = struct("VkDescriptorSetLayoutBinding", {
  binding: "u32", descriptorType: "u32", descriptorCount: "u32", stageFlags: "u32", pImmutableSamplers: "pointer",
});
export const VkDescriptorSetLayoutCreateInfo = struct("VkDescriptorSetLayoutCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", bindingCount: "u32", pBindings: "pointer",
}, { defaults: { sType: 32 } });
export const VkDescriptorPoolSize = struct("VkDescriptorPoolSize", {
  type: "u32", descriptorCount: "u32",
});
export const VkDescriptorPoolCreateInfo = struct("VkDescriptorPoolCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", maxSets: "u32", poolSizeCount: "u32", pPoolSizes: "pointer",
}, { defaults: { sType: 33 } });
export const VkDescriptorSetAllocateInfo = struct("VkDescriptorSetAllocateInfo", {
  sType: "u32", pNext: "pointer", descriptorPool: "u64", descriptorSetCount: "u32", pSetLayouts: "pointer",
}, { defaults: { sType: 34 } });
export const VkDescriptorBufferInfo = struct("VkDescriptorBufferInfo", {
  buffer: "u64", offset: "u64", range: "u64",
});
export const VkWriteDescriptorSet = struct("VkWriteDescriptorSet", {
  sType: "u32", pNext: "pointer", dstSet: "u64", dstBinding: "u32", dstArrayElement: "u32", descriptorCount: "u32",
  descriptorType: "u32", pImageInfo: "pointer", pBufferInfo: "pointer", pTexelBufferView: "pointer",
}, { defaults: { sType: 35 } });
export const VkCommandPoolCreateInfo = struct("VkCommandPoolCreateInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", queueFamilyIndex: "u32",
}, { defaults: { sType: 39 } });
export const VkCommandBufferAllocateInfo = struct("VkCommandBufferAllocateInfo", {
  sType: "u32", pNext: "pointer", commandPool: "u64", level: "u32", commandBufferCount: "u32",
}, { defaults: { sType: 40 } });
export const VkCommandBufferBeginInfo = struct("VkCommandBufferBeginInfo", {
  sType: "u32", pNext: "pointer", flags: "u32", pInheritanceInfo: "pointer",
}, { defaults: { sType: 42 } });
export const VkBufferCopy = struct("VkBufferCopy", {
  srcOffset: "u64", dstOffset: "u64", size: "u64",
});
export const VkMemoryBarrier = struct("VkMemoryBarrier", {
  sType: "u32", pNext: "pointer", srcAccessMask: "u32", dstAccessMask: "u32",
}, { defaults: { sType: 46 } });
export const VkBufferMemoryBarrier = struct("VkBufferMemoryBarrier", {
  sType: "u32", pNext: "pointer", srcAccessMask: "u32", dstAccessMask: "u32", srcQueueFamilyIndex: "u32",
  dstQueueFamilyIndex: "u32", buffer: "u64", offset: "u64", size: "u64",
}, { defaults: { sType: 44 } });
