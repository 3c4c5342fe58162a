// Test device registry entry for the ROCm backend (libhsa-runtime64). Without the library or an AMD GPU agent
// (CI: the library is installed, hsa_init finds no /dev/kfd): a string saying why, which the harness
// registers its tests as skipped with.
import type { Device } from "../../backends/device.ts";
import { probeBackend } from "../../backends/open.ts";

let shared: Promise<Device | string> | undefined;

/** A shared device for harness use, reopened if a test poisoned it; tests that poison or destroy open their own. */
export async function open(): Promise<Device | string> {
  const d = await shared;
  if (typeof d === "object" && d.poisoned !== undefined) {
    await d.destroy();
    shared = undefined;
  }
  shared ??= probeBackend("rocm");
  return shared;
}
