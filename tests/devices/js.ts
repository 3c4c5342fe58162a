// The JS device for the test registry: always present. Debug mode bounds-checks every access, so a kernel
// that strays faults (code 0) instead of reading NaN.
import type { Device } from "../../backends/device.ts";
import { probeBackend } from "../../backends/open.ts";

export function open(): Promise<Device | string> {
  return probeBackend("js", { js: { debug: true } });
}
