// Test device registry entry for the PTX backend (libcuda). Without libcuda or a CUDA GPU: a string saying
// why (the harness registers its tests as skipped with it).
import type { Device } from "../../backends/device.ts";
import { probeBackend } from "../../backends/open.ts";

let shared: Promise<Device | string> | undefined;

/** A shared device for read-only harness use; tests that poison or destroy a device open their own. */
export async function open(): Promise<Device | string> {
  const d = await shared;
  if (typeof d === "object" && d.poisoned !== undefined) {
    // Releasing the faulted primary context lets the next retain create a fresh one.
    await d.destroy();
    shared = undefined;
  }
  shared ??= probeBackend("ptx");
  return shared;
}
