// Run by two_backends.test.ts in a child process under Deno. As the main module it starts itself as a worker, which
// opens a WebGPU device and a raw Vulkan device, destroys both and ends, as a test file's isolate ends under `deno
// test --parallel`; then it prints "PINNED {json}": how many shared libraries the worker's opens mapped, and which
// of them were unmapped once the worker had ended (none may be: ffi/lib.ts pinLibrariesSince).
import { mappedLibraries } from "../../ffi/lib.ts";

if (import.meta.url.endsWith("?worker")) {
  const { openVulkanDevice } = await import("../../backends/vulkan/mod.ts");
  const { WgpuDevice } = await import("../../backends/wgpu/mod.ts");
  const before = mappedLibraries()!;
  const gpu = await WgpuDevice.open();
  if (typeof gpu === "string") throw new Error(gpu);
  await gpu.destroy();
  await openVulkanDevice().destroy();
  (self as unknown as Worker).postMessage([...mappedLibraries()!].filter((p) => !before.has(p)));
} else {
  const w = new Worker(`${import.meta.url}?worker`, { type: "module" });
  const loaded = await new Promise<string[]>((resolve, reject) => {
    w.onmessage = (e) => resolve(e.data);
    w.onerror = (e) => {
      e.preventDefault();
      reject(new Error(e.message));
    };
  });
  w.terminate();
  // (the worker's isolate, and with it the runtime's WebGPU instance, goes away after terminate returns)
  await new Promise((r) => setTimeout(r, 500));
  const now = mappedLibraries()!;
  console.log(`PINNED ${JSON.stringify({ loaded: loaded.length, gone: loaded.filter((p) => !now.has(p)) })}`);
}
