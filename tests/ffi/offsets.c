/*
 * Prints the sizes, alignments and field offsets of the C structs that poot lays out in TypeScript
 * (ffi/vulkan_structs.ts, ffi/cuda.ts, ffi/hsa.ts), as one JSON object, from the real headers.
 * tests/ffi/layout.test.ts compiles and runs it when `cc` and the headers exist, and otherwise compares
 * against offsets.expected.json (made by: cc -I/usr/local/cuda/include offsets.c -o o && ./o).
 * A header that is missing drops its section.
 */
#include <stddef.h>
#include <stdio.h>

#if __has_include(<vulkan/vulkan_core.h>)
#include <vulkan/vulkan_core.h>
#define HAVE_VULKAN 1
#else
#define HAVE_VULKAN 0
#endif
#if __has_include(<cuda.h>)
#include <cuda.h>
#define HAVE_CUDA 1
#else
#define HAVE_CUDA 0
#endif
#if __has_include(<hsa/hsa.h>) && __has_include(<hsa/hsa_ext_amd.h>)
#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>
#define HAVE_HSA 1
#else
#define HAVE_HSA 0
#endif

static int first_struct = 1, first_field = 1;
static void begin(const char *name, size_t size, size_t align) {
  printf("%s\n  \"%s\": {\"size\": %zu, \"align\": %zu, \"fields\": {", first_struct ? "" : ",", name, size, align);
  first_struct = 0;
  first_field = 1;
}
static void field(const char *name, size_t offset) {
  printf("%s\"%s\": %zu", first_field ? "" : ", ", name, offset);
  first_field = 0;
}
#define STR_(x) #x
#define STR(x) STR_(x)
#define S() begin(STR(T), sizeof(T), _Alignof(T));
#define F(f) field(#f, offsetof(T, f));
#define E() printf("}}");

int main(void) {
  printf("{");
#if HAVE_VULKAN
#undef T
#define T VkApplicationInfo
  S() F(sType) F(pNext) F(pApplicationName) F(applicationVersion) F(pEngineName) F(engineVersion)
      F(apiVersion) E()
#undef T
#define T VkBufferCopy
  S() F(srcOffset) F(dstOffset) F(size) E()
#undef T
#define T VkBufferCreateInfo
  S() F(sType) F(pNext) F(flags) F(size) F(usage) F(sharingMode) F(queueFamilyIndexCount)
      F(pQueueFamilyIndices) E()
#undef T
#define T VkBufferDeviceAddressInfo
  S() F(sType) F(pNext) F(buffer) E()
#undef T
#define T VkBufferMemoryBarrier
  S() F(sType) F(pNext) F(srcAccessMask) F(dstAccessMask) F(srcQueueFamilyIndex) F(dstQueueFamilyIndex)
      F(buffer) F(offset) F(size) E()
#undef T
#define T VkCommandBufferAllocateInfo
  S() F(sType) F(pNext) F(commandPool) F(level) F(commandBufferCount) E()
#undef T
#define T VkCommandBufferBeginInfo
  S() F(sType) F(pNext) F(flags) F(pInheritanceInfo) E()
#undef T
#define T VkCommandPoolCreateInfo
  S() F(sType) F(pNext) F(flags) F(queueFamilyIndex) E()
#undef T
#define T VkComputePipelineCreateInfo
  S() F(sType) F(pNext) F(flags) F(stage) F(layout) F(basePipelineHandle) F(basePipelineIndex) E()
#undef T
#ifdef VK_KHR_cooperative_matrix /* headers 1.3.255 and later */
#define T VkCooperativeMatrixPropertiesKHR
  S() F(sType) F(pNext) F(MSize) F(NSize) F(KSize) F(AType) F(BType) F(CType) F(ResultType)
      F(saturatingAccumulation) F(scope) E()
#undef T
#define T VkPhysicalDeviceCooperativeMatrixFeaturesKHR
  S() F(sType) F(pNext) F(cooperativeMatrix) F(cooperativeMatrixRobustBufferAccess) E()
#undef T
#endif
#define T VkConformanceVersion
  S() F(major) F(minor) F(subminor) F(patch) E()
#undef T
#define T VkDescriptorBufferInfo
  S() F(buffer) F(offset) F(range) E()
#undef T
#define T VkDescriptorPoolCreateInfo
  S() F(sType) F(pNext) F(flags) F(maxSets) F(poolSizeCount) F(pPoolSizes) E()
#undef T
#define T VkDescriptorPoolSize
  S() F(type) F(descriptorCount) E()
#undef T
#define T VkDescriptorSetAllocateInfo
  S() F(sType) F(pNext) F(descriptorPool) F(descriptorSetCount) F(pSetLayouts) E()
#undef T
#define T VkDescriptorSetLayoutBinding
  S() F(binding) F(descriptorType) F(descriptorCount) F(stageFlags) F(pImmutableSamplers) E()
#undef T
#define T VkDescriptorSetLayoutCreateInfo
  S() F(sType) F(pNext) F(flags) F(bindingCount) F(pBindings) E()
#undef T
#define T VkDeviceCreateInfo
  S() F(sType) F(pNext) F(flags) F(queueCreateInfoCount) F(pQueueCreateInfos) F(enabledLayerCount)
      F(ppEnabledLayerNames) F(enabledExtensionCount) F(ppEnabledExtensionNames) F(pEnabledFeatures) E()
#undef T
#define T VkDeviceQueueCreateInfo
  S() F(sType) F(pNext) F(flags) F(queueFamilyIndex) F(queueCount) F(pQueuePriorities) E()
#undef T
#define T VkExtensionProperties
  S() F(extensionName) F(specVersion) E()
#undef T
#define T VkExtent3D
  S() F(width) F(height) F(depth) E()
#undef T
#define T VkFenceCreateInfo
  S() F(sType) F(pNext) F(flags) E()
#undef T
#define T VkInstanceCreateInfo
  S() F(sType) F(pNext) F(flags) F(pApplicationInfo) F(enabledLayerCount) F(ppEnabledLayerNames)
      F(enabledExtensionCount) F(ppEnabledExtensionNames) E()
#undef T
#define T VkMappedMemoryRange
  S() F(sType) F(pNext) F(memory) F(offset) F(size) E()
#undef T
#define T VkMemoryAllocateFlagsInfo
  S() F(sType) F(pNext) F(flags) F(deviceMask) E()
#undef T
#define T VkMemoryAllocateInfo
  S() F(sType) F(pNext) F(allocationSize) F(memoryTypeIndex) E()
#undef T
#define T VkMemoryBarrier
  S() F(sType) F(pNext) F(srcAccessMask) F(dstAccessMask) E()
#undef T
#define T VkMemoryHeap
  S() F(size) F(flags) E()
#undef T
#define T VkMemoryRequirements
  S() F(size) F(alignment) F(memoryTypeBits) E()
#undef T
#define T VkMemoryType
  S() F(propertyFlags) F(heapIndex) E()
#undef T
#define T VkPhysicalDevice16BitStorageFeatures
  S() F(sType) F(pNext) F(storageBuffer16BitAccess) F(uniformAndStorageBuffer16BitAccess)
      F(storagePushConstant16) F(storageInputOutput16) E()
#undef T
#define T VkPhysicalDevice8BitStorageFeatures
  S() F(sType) F(pNext) F(storageBuffer8BitAccess) F(uniformAndStorageBuffer8BitAccess)
      F(storagePushConstant8) E()
#undef T
#define T VkPhysicalDeviceDriverProperties
  S() F(sType) F(pNext) F(driverID) F(driverName) F(driverInfo) F(conformanceVersion) E()
#undef T
#define T VkPhysicalDeviceFeatures
  S() F(robustBufferAccess) F(fullDrawIndexUint32) F(imageCubeArray) F(independentBlend) F(geometryShader)
      F(tessellationShader) F(sampleRateShading) F(dualSrcBlend) F(logicOp) F(multiDrawIndirect)
      F(drawIndirectFirstInstance) F(depthClamp) F(depthBiasClamp) F(fillModeNonSolid) F(depthBounds)
      F(wideLines) F(largePoints) F(alphaToOne) F(multiViewport) F(samplerAnisotropy)
      F(textureCompressionETC2) F(textureCompressionASTC_LDR) F(textureCompressionBC)
      F(occlusionQueryPrecise) F(pipelineStatisticsQuery) F(vertexPipelineStoresAndAtomics)
      F(fragmentStoresAndAtomics) F(shaderTessellationAndGeometryPointSize) F(shaderImageGatherExtended)
      F(shaderStorageImageExtendedFormats) F(shaderStorageImageMultisample)
      F(shaderStorageImageReadWithoutFormat) F(shaderStorageImageWriteWithoutFormat)
      F(shaderUniformBufferArrayDynamicIndexing) F(shaderSampledImageArrayDynamicIndexing)
      F(shaderStorageBufferArrayDynamicIndexing) F(shaderStorageImageArrayDynamicIndexing)
      F(shaderClipDistance) F(shaderCullDistance) F(shaderFloat64) F(shaderInt64) F(shaderInt16)
      F(shaderResourceResidency) F(shaderResourceMinLod) F(sparseBinding) F(sparseResidencyBuffer)
      F(sparseResidencyImage2D) F(sparseResidencyImage3D) F(sparseResidency2Samples)
      F(sparseResidency4Samples) F(sparseResidency8Samples) F(sparseResidency16Samples)
      F(sparseResidencyAliased) F(variableMultisampleRate) F(inheritedQueries) E()
#undef T
#define T VkPhysicalDeviceFeatures2
  S() F(sType) F(pNext) F(features) E()
#undef T
#define T VkPhysicalDeviceLimits
  S() F(maxImageDimension1D) F(maxImageDimension2D) F(maxImageDimension3D) F(maxImageDimensionCube)
      F(maxImageArrayLayers) F(maxTexelBufferElements) F(maxUniformBufferRange) F(maxStorageBufferRange)
      F(maxPushConstantsSize) F(maxMemoryAllocationCount) F(maxSamplerAllocationCount)
      F(bufferImageGranularity) F(sparseAddressSpaceSize) F(maxBoundDescriptorSets)
      F(maxPerStageDescriptorSamplers) F(maxPerStageDescriptorUniformBuffers)
      F(maxPerStageDescriptorStorageBuffers) F(maxPerStageDescriptorSampledImages)
      F(maxPerStageDescriptorStorageImages) F(maxPerStageDescriptorInputAttachments) F(maxPerStageResources)
      F(maxDescriptorSetSamplers) F(maxDescriptorSetUniformBuffers) F(maxDescriptorSetUniformBuffersDynamic)
      F(maxDescriptorSetStorageBuffers) F(maxDescriptorSetStorageBuffersDynamic)
      F(maxDescriptorSetSampledImages) F(maxDescriptorSetStorageImages) F(maxDescriptorSetInputAttachments)
      F(maxVertexInputAttributes) F(maxVertexInputBindings) F(maxVertexInputAttributeOffset)
      F(maxVertexInputBindingStride) F(maxVertexOutputComponents) F(maxTessellationGenerationLevel)
      F(maxTessellationPatchSize) F(maxTessellationControlPerVertexInputComponents)
      F(maxTessellationControlPerVertexOutputComponents) F(maxTessellationControlPerPatchOutputComponents)
      F(maxTessellationControlTotalOutputComponents) F(maxTessellationEvaluationInputComponents)
      F(maxTessellationEvaluationOutputComponents) F(maxGeometryShaderInvocations)
      F(maxGeometryInputComponents) F(maxGeometryOutputComponents) F(maxGeometryOutputVertices)
      F(maxGeometryTotalOutputComponents) F(maxFragmentInputComponents) F(maxFragmentOutputAttachments)
      F(maxFragmentDualSrcAttachments) F(maxFragmentCombinedOutputResources) F(maxComputeSharedMemorySize)
      F(maxComputeWorkGroupCount) F(maxComputeWorkGroupInvocations) F(maxComputeWorkGroupSize)
      F(subPixelPrecisionBits) F(subTexelPrecisionBits) F(mipmapPrecisionBits) F(maxDrawIndexedIndexValue)
      F(maxDrawIndirectCount) F(maxSamplerLodBias) F(maxSamplerAnisotropy) F(maxViewports)
      F(maxViewportDimensions) F(viewportBoundsRange) F(viewportSubPixelBits) F(minMemoryMapAlignment)
      F(minTexelBufferOffsetAlignment) F(minUniformBufferOffsetAlignment) F(minStorageBufferOffsetAlignment)
      F(minTexelOffset) F(maxTexelOffset) F(minTexelGatherOffset) F(maxTexelGatherOffset)
      F(minInterpolationOffset) F(maxInterpolationOffset) F(subPixelInterpolationOffsetBits)
      F(maxFramebufferWidth) F(maxFramebufferHeight) F(maxFramebufferLayers) F(framebufferColorSampleCounts)
      F(framebufferDepthSampleCounts) F(framebufferStencilSampleCounts)
      F(framebufferNoAttachmentsSampleCounts) F(maxColorAttachments) F(sampledImageColorSampleCounts)
      F(sampledImageIntegerSampleCounts) F(sampledImageDepthSampleCounts) F(sampledImageStencilSampleCounts)
      F(storageImageSampleCounts) F(maxSampleMaskWords) F(timestampComputeAndGraphics) F(timestampPeriod)
      F(maxClipDistances) F(maxCullDistances) F(maxCombinedClipAndCullDistances) F(discreteQueuePriorities)
      F(pointSizeRange) F(lineWidthRange) F(pointSizeGranularity) F(lineWidthGranularity) F(strictLines)
      F(standardSampleLocations) F(optimalBufferCopyOffsetAlignment) F(optimalBufferCopyRowPitchAlignment)
      F(nonCoherentAtomSize) E()
#undef T
#define T VkPhysicalDeviceMemoryBudgetPropertiesEXT
  S() F(sType) F(pNext) F(heapBudget) F(heapUsage) E()
#undef T
#define T VkPhysicalDeviceMemoryProperties
  S() F(memoryTypeCount) F(memoryTypes) F(memoryHeapCount) F(memoryHeaps) E()
#undef T
#define T VkPhysicalDeviceMemoryProperties2
  S() F(sType) F(pNext) F(memoryProperties) E()
#undef T
#define T VkPhysicalDeviceProperties
  S() F(apiVersion) F(driverVersion) F(vendorID) F(deviceID) F(deviceType) F(deviceName) F(pipelineCacheUUID)
      F(limits) F(sparseProperties) E()
#undef T
#define T VkPhysicalDeviceProperties2
  S() F(sType) F(pNext) F(properties) E()
#undef T
#define T VkPhysicalDeviceRobustness2FeaturesEXT
  S() F(sType) F(pNext) F(robustBufferAccess2) F(robustImageAccess2) F(nullDescriptor) E()
#undef T
#ifdef VK_KHR_shader_bfloat16 /* headers 1.4.311 and later */
#define T VkPhysicalDeviceShaderBfloat16FeaturesKHR
  S() F(sType) F(pNext) F(shaderBFloat16Type) F(shaderBFloat16DotProduct) F(shaderBFloat16CooperativeMatrix) E()
#undef T
#endif
#define T VkPhysicalDeviceShaderFloat16Int8Features
  S() F(sType) F(pNext) F(shaderFloat16) F(shaderInt8) E()
#undef T
#define T VkPhysicalDeviceShaderIntegerDotProductFeatures
  S() F(sType) F(pNext) F(shaderIntegerDotProduct) E()
#undef T
#define T VkPhysicalDeviceShaderIntegerDotProductProperties
  S() F(sType) F(pNext) F(integerDotProduct8BitUnsignedAccelerated) F(integerDotProduct8BitSignedAccelerated)
      F(integerDotProduct8BitMixedSignednessAccelerated) F(integerDotProduct4x8BitPackedUnsignedAccelerated)
      F(integerDotProduct4x8BitPackedSignedAccelerated)
      F(integerDotProduct4x8BitPackedMixedSignednessAccelerated) F(integerDotProduct16BitUnsignedAccelerated)
      F(integerDotProduct16BitSignedAccelerated) F(integerDotProduct16BitMixedSignednessAccelerated)
      F(integerDotProduct32BitUnsignedAccelerated) F(integerDotProduct32BitSignedAccelerated)
      F(integerDotProduct32BitMixedSignednessAccelerated) F(integerDotProduct64BitUnsignedAccelerated)
      F(integerDotProduct64BitSignedAccelerated) F(integerDotProduct64BitMixedSignednessAccelerated)
      F(integerDotProductAccumulatingSaturating8BitUnsignedAccelerated)
      F(integerDotProductAccumulatingSaturating8BitSignedAccelerated)
      F(integerDotProductAccumulatingSaturating8BitMixedSignednessAccelerated)
      F(integerDotProductAccumulatingSaturating4x8BitPackedUnsignedAccelerated)
      F(integerDotProductAccumulatingSaturating4x8BitPackedSignedAccelerated)
      F(integerDotProductAccumulatingSaturating4x8BitPackedMixedSignednessAccelerated)
      F(integerDotProductAccumulatingSaturating16BitUnsignedAccelerated)
      F(integerDotProductAccumulatingSaturating16BitSignedAccelerated)
      F(integerDotProductAccumulatingSaturating16BitMixedSignednessAccelerated)
      F(integerDotProductAccumulatingSaturating32BitUnsignedAccelerated)
      F(integerDotProductAccumulatingSaturating32BitSignedAccelerated)
      F(integerDotProductAccumulatingSaturating32BitMixedSignednessAccelerated)
      F(integerDotProductAccumulatingSaturating64BitUnsignedAccelerated)
      F(integerDotProductAccumulatingSaturating64BitSignedAccelerated)
      F(integerDotProductAccumulatingSaturating64BitMixedSignednessAccelerated) E()
#undef T
#define T VkPhysicalDeviceSparseProperties
  S() F(residencyStandard2DBlockShape) F(residencyStandard2DMultisampleBlockShape)
      F(residencyStandard3DBlockShape) F(residencyAlignedMipSize) F(residencyNonResidentStrict) E()
#undef T
#define T VkPhysicalDeviceSubgroupProperties
  S() F(sType) F(pNext) F(subgroupSize) F(supportedStages) F(supportedOperations)
      F(quadOperationsInAllStages) E()
#undef T
#define T VkPhysicalDeviceSubgroupSizeControlFeatures
  S() F(sType) F(pNext) F(subgroupSizeControl) F(computeFullSubgroups) E()
#undef T
#define T VkPhysicalDeviceSubgroupSizeControlProperties
  S() F(sType) F(pNext) F(minSubgroupSize) F(maxSubgroupSize) F(maxComputeWorkgroupSubgroups)
      F(requiredSubgroupSizeStages) E()
#undef T
#define T VkPhysicalDeviceTimelineSemaphoreFeatures
  S() F(sType) F(pNext) F(timelineSemaphore) E()
#undef T
#define T VkPhysicalDeviceVulkanMemoryModelFeatures
  S() F(sType) F(pNext) F(vulkanMemoryModel) F(vulkanMemoryModelDeviceScope)
      F(vulkanMemoryModelAvailabilityVisibilityChains) E()
#undef T
#define T VkPhysicalDeviceVulkan11Features
  S() F(sType) F(pNext) F(storageBuffer16BitAccess) F(uniformAndStorageBuffer16BitAccess)
      F(storagePushConstant16) F(storageInputOutput16) F(multiview) F(multiviewGeometryShader)
      F(multiviewTessellationShader) F(variablePointersStorageBuffer) F(variablePointers) F(protectedMemory)
      F(samplerYcbcrConversion) F(shaderDrawParameters) E()
#undef T
#define T VkPhysicalDeviceVulkan12Features
  S() F(sType) F(pNext) F(samplerMirrorClampToEdge) F(drawIndirectCount) F(storageBuffer8BitAccess)
      F(uniformAndStorageBuffer8BitAccess) F(storagePushConstant8) F(shaderBufferInt64Atomics)
      F(shaderSharedInt64Atomics) F(shaderFloat16) F(shaderInt8) F(descriptorIndexing)
      F(shaderInputAttachmentArrayDynamicIndexing) F(shaderUniformTexelBufferArrayDynamicIndexing)
      F(shaderStorageTexelBufferArrayDynamicIndexing) F(shaderUniformBufferArrayNonUniformIndexing)
      F(shaderSampledImageArrayNonUniformIndexing) F(shaderStorageBufferArrayNonUniformIndexing)
      F(shaderStorageImageArrayNonUniformIndexing) F(shaderInputAttachmentArrayNonUniformIndexing)
      F(shaderUniformTexelBufferArrayNonUniformIndexing) F(shaderStorageTexelBufferArrayNonUniformIndexing)
      F(descriptorBindingUniformBufferUpdateAfterBind) F(descriptorBindingSampledImageUpdateAfterBind)
      F(descriptorBindingStorageImageUpdateAfterBind) F(descriptorBindingStorageBufferUpdateAfterBind)
      F(descriptorBindingUniformTexelBufferUpdateAfterBind)
      F(descriptorBindingStorageTexelBufferUpdateAfterBind) F(descriptorBindingUpdateUnusedWhilePending)
      F(descriptorBindingPartiallyBound) F(descriptorBindingVariableDescriptorCount)
      F(runtimeDescriptorArray) F(samplerFilterMinmax) F(scalarBlockLayout) F(imagelessFramebuffer)
      F(uniformBufferStandardLayout) F(shaderSubgroupExtendedTypes) F(separateDepthStencilLayouts)
      F(hostQueryReset) F(timelineSemaphore) F(bufferDeviceAddress) F(bufferDeviceAddressCaptureReplay)
      F(bufferDeviceAddressMultiDevice) F(vulkanMemoryModel) F(vulkanMemoryModelDeviceScope)
      F(vulkanMemoryModelAvailabilityVisibilityChains) F(shaderOutputViewportIndex) F(shaderOutputLayer)
      F(subgroupBroadcastDynamicId) E()
#undef T
#define T VkPhysicalDeviceVulkan13Features
  S() F(sType) F(pNext) F(robustImageAccess) F(inlineUniformBlock)
      F(descriptorBindingInlineUniformBlockUpdateAfterBind) F(pipelineCreationCacheControl) F(privateData)
      F(shaderDemoteToHelperInvocation) F(shaderTerminateInvocation) F(subgroupSizeControl)
      F(computeFullSubgroups) F(synchronization2) F(textureCompressionASTC_HDR)
      F(shaderZeroInitializeWorkgroupMemory) F(dynamicRendering) F(shaderIntegerDotProduct) F(maintenance4) E()
#undef T
#define T VkPipelineLayoutCreateInfo
  S() F(sType) F(pNext) F(flags) F(setLayoutCount) F(pSetLayouts) F(pushConstantRangeCount)
      F(pPushConstantRanges) E()
#undef T
#define T VkPipelineShaderStageCreateInfo
  S() F(sType) F(pNext) F(flags) F(stage) F(module) F(pName) F(pSpecializationInfo) E()
#undef T
#define T VkPipelineShaderStageRequiredSubgroupSizeCreateInfo
  S() F(sType) F(pNext) F(requiredSubgroupSize) E()
#undef T
#define T VkPushConstantRange
  S() F(stageFlags) F(offset) F(size) E()
#undef T
#define T VkQueryPoolCreateInfo
  S() F(sType) F(pNext) F(flags) F(queryType) F(queryCount) F(pipelineStatistics) E()
#undef T
#define T VkQueueFamilyProperties
  S() F(queueFlags) F(queueCount) F(timestampValidBits) F(minImageTransferGranularity) E()
#undef T
#define T VkSemaphoreCreateInfo
  S() F(sType) F(pNext) F(flags) E()
#undef T
#define T VkSemaphoreSignalInfo
  S() F(sType) F(pNext) F(semaphore) F(value) E()
#undef T
#define T VkSemaphoreTypeCreateInfo
  S() F(sType) F(pNext) F(semaphoreType) F(initialValue) E()
#undef T
#define T VkSemaphoreWaitInfo
  S() F(sType) F(pNext) F(flags) F(semaphoreCount) F(pSemaphores) F(pValues) E()
#undef T
#define T VkShaderModuleCreateInfo
  S() F(sType) F(pNext) F(flags) F(codeSize) F(pCode) E()
#undef T
#define T VkSpecializationInfo
  S() F(mapEntryCount) F(pMapEntries) F(dataSize) F(pData) E()
#undef T
#define T VkSpecializationMapEntry
  S() F(constantID) F(offset) F(size) E()
#undef T
#define T VkSubmitInfo
  S() F(sType) F(pNext) F(waitSemaphoreCount) F(pWaitSemaphores) F(pWaitDstStageMask) F(commandBufferCount)
      F(pCommandBuffers) F(signalSemaphoreCount) F(pSignalSemaphores) E()
#undef T
#define T VkTimelineSemaphoreSubmitInfo
  S() F(sType) F(pNext) F(waitSemaphoreValueCount) F(pWaitSemaphoreValues) F(signalSemaphoreValueCount)
      F(pSignalSemaphoreValues) E()
#undef T
#define T VkWriteDescriptorSet
  S() F(sType) F(pNext) F(dstSet) F(dstBinding) F(dstArrayElement) F(descriptorCount) F(descriptorType)
      F(pImageInfo) F(pBufferInfo) F(pTexelBufferView) E()
#endif
#if HAVE_CUDA
#undef T
#define T CUDA_KERNEL_NODE_PARAMS
  S() F(func) F(gridDimX) F(gridDimY) F(gridDimZ) F(blockDimX) F(blockDimY) F(blockDimZ) F(sharedMemBytes)
      F(kernelParams) F(extra) F(kern) F(ctx) E()
#undef T
#define T CUDA_LAUNCH_PARAMS
  S() F(function) F(gridDimX) F(gridDimY) F(gridDimZ) F(blockDimX) F(blockDimY) F(blockDimZ)
      F(sharedMemBytes) F(hStream) F(kernelParams) E()
#undef T
#define T CUDA_MEMCPY2D
  S() F(srcXInBytes) F(srcY) F(srcMemoryType) F(srcHost) F(srcDevice) F(srcArray) F(srcPitch) F(dstXInBytes)
      F(dstY) F(dstMemoryType) F(dstHost) F(dstDevice) F(dstArray) F(dstPitch) F(WidthInBytes) F(Height) E()
#endif
#if HAVE_HSA
#undef T
#define T hsa_agent_dispatch_packet_t
  S() F(header) F(type) F(reserved0) F(return_address) F(arg) F(reserved2) F(completion_signal) E()
#undef T
#define T hsa_amd_barrier_value_packet_t
  S() F(header) F(reserved0) F(signal) F(value) F(mask) F(cond) F(reserved1) F(reserved2) F(reserved3)
      F(completion_signal) E()
#undef T
#define T hsa_amd_event_t
  S() F(event_type) F(memory_fault) E()
#undef T
#define T hsa_amd_gpu_memory_fault_info_t
  S() F(agent) F(virtual_address) F(fault_reason_mask) E()
#undef T
#define T hsa_amd_profiling_dispatch_time_t
  S() F(start) F(end) E()
#undef T
#define T hsa_amd_vendor_packet_header_t
  S() F(header) F(AmdFormat) F(reserved) E()
#undef T
#define T hsa_barrier_and_packet_t
  S() F(header) F(reserved0) F(reserved1) F(dep_signal) F(reserved2) F(completion_signal) E()
#undef T
#define T hsa_barrier_or_packet_t
  S() F(header) F(reserved0) F(reserved1) F(dep_signal) F(reserved2) F(completion_signal) E()
#undef T
#define T hsa_kernel_dispatch_packet_t
  S() F(header) F(setup) F(workgroup_size_x) F(workgroup_size_y) F(workgroup_size_z) F(reserved0)
      F(grid_size_x) F(grid_size_y) F(grid_size_z) F(private_segment_size) F(group_segment_size)
      F(kernel_object) F(kernarg_address) F(reserved2) F(completion_signal) E()
#undef T
#define T hsa_queue_t
  S() F(type) F(features) F(base_address) F(doorbell_signal) F(size) F(reserved1) F(id) E()
#endif
  printf("\n}\n");
  return 0;
}
