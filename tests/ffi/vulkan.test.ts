// Raw Vulkan through ffi/vulkan.ts: an instance on whatever driver the loader finds (lavapipe in CI), its
// physical device, feature chains, and a compute dispatch that adds 1 to a buffer, recorded once and replayed.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ptrView } from "../../ffi/lib.ts";
import { pack } from "../../ffi/layout.ts";
import * as vk from "../../ffi/vulkan.ts";
import { addOneShader } from "./spirv.ts";

// Probe once: a loader, an instance and at least one physical device.
let probe: { api: vk.Vulkan; instance: bigint; pd: bigint } | string;
try {
  const api = vk.openVulkan();
  const instance = api.createInstance({ appName: "poot-ffi-test", apiVersion: vk.VK_API_VERSION_1_2 });
  const pds = api.physicalDevices(instance);
  if (pds.length === 0) {
    api.destroyInstance(instance);
    probe = "no Vulkan physical device";
  } else probe = { api, instance, pd: pds[0] };
} catch (e) {
  probe = `no Vulkan: ${(e as Error).message}`;
}
const skip = typeof probe === "string" ? probe : false;
const ctx = () => probe as { api: vk.Vulkan; instance: bigint; pd: bigint };

test("Vulkan instance and physical device name", { skip }, () => {
  const { api, pd } = ctx();
  assert.ok(api.instanceVersion() >= vk.VK_API_VERSION_1_0);
  const props = api.physicalDeviceProperties(pd);
  assert.ok(props.deviceName.length > 0, "device has a name");
  assert.ok(props.limits.maxComputeWorkGroupInvocations >= 128);
  assert.equal(props.limits.maxComputeWorkGroupCount.length, 3);
  if (process.env.VK_DRIVER_FILES?.includes("lvp")) assert.match(props.deviceName, /llvmpipe/);
  const fams = api.queueFamilies(pd);
  assert.ok(fams.some((f) => f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT));
  const mem = api.memoryProperties(pd);
  assert.ok(mem.memoryTypeCount > 0 && mem.memoryHeapCount > 0);
  assert.ok(api.deviceExtensions(pd).length > 0);
});

test("Vulkan feature and property chains", { skip }, () => {
  const { api, pd } = ctx();
  const [f2, s16, f16, tl] = api.physicalDeviceFeatures2(pd, [
    vk.VkPhysicalDevice16BitStorageFeatures,
    vk.VkPhysicalDeviceShaderFloat16Int8Features,
    vk.VkPhysicalDeviceTimelineSemaphoreFeatures,
  ]);
  assert.equal(f2.sType, 1000059000);
  // The chain came back filled: each struct kept its sType, and the driver wrote booleans (0 or 1).
  assert.equal(s16.sType, 1000083000);
  assert.ok([0, 1].includes(s16.storageBuffer16BitAccess) && [0, 1].includes(f16.shaderInt8));
  const [p2, sub] = api.physicalDeviceProperties2(pd, [vk.VkPhysicalDeviceSubgroupProperties]);
  assert.equal(p2.properties.deviceName, api.physicalDeviceProperties(pd).deviceName);
  assert.ok(sub.subgroupSize >= 1 && (sub.subgroupSize & (sub.subgroupSize - 1)) === 0, `subgroup size ${sub.subgroupSize}`);
  if (process.env.VK_DRIVER_FILES?.includes("lvp")) {
    assert.equal(f2.features.robustBufferAccess, 1);
    assert.equal(tl.timelineSemaphore, 1);
  }
});

test("SPIR-V of the test shader validates", { skip: hasTool("spirv-val") ? false : "spirv-val not installed" }, () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-spv-"));
  try {
    const f = join(dir, "add1.spv");
    writeFileSync(f, new Uint8Array(addOneShader().buffer));
    execFileSync("spirv-val", ["--target-env", "vulkan1.1", f]);
  } finally {
    rmSync(dir, { recursive: true });
  }
});

test("Vulkan compute dispatch adds 1, recorded once and replayed", { skip }, () => {
  const { api, pd } = ctx();
  const family = api.queueFamilies(pd).findIndex((f) => f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT);
  const timeline = api.physicalDeviceFeatures2(pd, [vk.VkPhysicalDeviceTimelineSemaphoreFeatures])[1].timelineSemaphore === 1;
  const pNext = timeline ? pack(vk.VkPhysicalDeviceTimelineSemaphoreFeatures, { timelineSemaphore: 1 }) : undefined;
  const device = api.createDevice(pd, { queues: [{ family }], pNext });
  const queue = api.deviceQueue(device, family);
  const n = 1024;
  const bytes = n * 4;
  const buffer = api.createBuffer(device, bytes, vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT);
  const req = api.bufferMemoryRequirements(device, buffer);
  assert.ok(req.size >= BigInt(bytes));
  const want = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const mp = api.memoryProperties(pd);
  const typeIndex = mp.memoryTypes.slice(0, mp.memoryTypeCount).findIndex((t, i) => (req.memoryTypeBits & (1 << i)) && (t.propertyFlags & want) === want);
  assert.ok(typeIndex >= 0, "a host-visible coherent memory type");
  const memory = api.allocateMemory(device, req.size, typeIndex);
  api.bindBufferMemory(device, buffer, memory);
  const mapped = new Uint32Array(ptrView(api.mapMemory(device, memory), bytes));
  for (let i = 0; i < n; i++) mapped[i] = i * 3;

  const module = api.createShaderModule(device, addOneShader());
  const dsl = api.createDescriptorSetLayout(device, [{ binding: 0 }]);
  const pool = api.createDescriptorPool(device, 1, [{ type: vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, descriptorCount: 1 }]);
  const [set] = api.allocateDescriptorSets(device, pool, [dsl]);
  api.updateDescriptorSets(device, [{ set, binding: 0, buffers: [{ buffer }] }]);
  const layout = api.createPipelineLayout(device, [dsl]);
  const pipeline = api.createComputePipeline(device, { layout, module });

  const cmdPool = api.createCommandPool(device, family);
  const [cb] = api.allocateCommandBuffers(device, cmdPool, 1);
  api.beginCommandBuffer(cb);
  api.cmdBindPipeline(cb, pipeline);
  api.cmdBindDescriptorSets(cb, layout, 0, [set]);
  api.cmdDispatch(cb, n / 64);
  api.cmdFullBarrier(cb);
  api.cmdPipelineBarrier(cb, {
    srcStage: vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
    dstStage: vk.VK_PIPELINE_STAGE_HOST_BIT,
    buffers: [{ srcAccessMask: vk.VK_ACCESS_SHADER_WRITE_BIT, dstAccessMask: vk.VK_ACCESS_HOST_READ_BIT, buffer }],
  });
  api.endCommandBuffer(cb);

  // Replay the recorded command buffer verbatim: packed once, one fence, wait + reset between replays.
  const fence = api.createFence(device);
  const fences = new BigUint64Array([fence]);
  const submit = api.packSubmits([{ commandBuffers: [cb] }]);
  for (let r = 1; r <= 3; r++) {
    api.queueSubmit(queue, submit, fence);
    assert.equal(api.waitForFences(device, fences, 10_000_000_000n), true);
    assert.equal(api.fenceSignaled(device, fence), true);
    api.resetFences(device, fences);
    for (const i of [0, 1, 63, 64, 500, n - 1]) assert.equal(mapped[i], i * 3 + r, `element ${i} after replay ${r}`);
  }

  if (timeline) {
    const sem = api.createSemaphore(device, 5n);
    assert.equal(api.semaphoreCounterValue(device, sem), 5n);
    api.queueSubmit(queue, [{ commandBuffers: [cb], signal: [{ semaphore: sem, value: 6n }] }]);
    assert.equal(api.waitSemaphores(device, [sem], [6n], 10_000_000_000n), true);
    assert.equal(mapped[7], 7 * 3 + 4);
    api.signalSemaphore(device, sem, 9n);
    assert.equal(api.semaphoreCounterValue(device, sem), 9n);
    api.destroySemaphore(device, sem);
  }

  api.deviceWaitIdle(device);
  api.destroyFence(device, fence);
  api.freeCommandBuffers(device, cmdPool, [cb]);
  api.destroyCommandPool(device, cmdPool);
  api.destroyPipeline(device, pipeline);
  api.destroyPipelineLayout(device, layout);
  api.destroyDescriptorPool(device, pool);
  api.destroyDescriptorSetLayout(device, dsl);
  api.destroyShaderModule(device, module);
  api.unmapMemory(device, memory);
  api.destroyBuffer(device, buffer);
  api.freeMemory(device, memory);
  api.destroyDevice(device);
});

test("a failing Vulkan call raises VkError with the function and result name", { skip }, () => {
  const { api, pd } = ctx();
  const family = api.queueFamilies(pd).findIndex((f) => f.queueFlags & vk.VK_QUEUE_COMPUTE_BIT);
  const err = (() => {
    try {
      api.createDevice(pd, { queues: [{ family }], extensions: ["VK_POOT_no_such_extension"] });
    } catch (e) {
      return e;
    }
  })();
  assert.ok(err instanceof vk.VkError);
  assert.equal(err.fn, "vkCreateDevice");
  assert.equal(err.result, "VK_ERROR_EXTENSION_NOT_PRESENT");
  assert.equal(err.code, -7);
});

function hasTool(name: string): boolean {
  try {
    execFileSync(name, ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
