// Test device registry entry for the PTX backend (libcuda). Without libcuda or a CUDA GPU: a string saying
// why (the harness registers its tests as skipped with it).
import type { Device } from "../../backends/device.ts";
import { probePtx, type PtxDevice } from "../../backends/ptx/mod.ts";

let shared: PtxDevice | string | undefined;

/** A shared device for read-only harness use; tests that poison or destroy a device open their own. */
export async function open(): Promise<Device | string> {
  if (typeof shared === "object" && shared.poisoned !== undefined) {
    // Releasing the faulted primary context lets the next retain create a fresh one.
    await shared.destroy();
    shared = undefined;
  }
  shared ??= probePtx();
  return shared;
}
