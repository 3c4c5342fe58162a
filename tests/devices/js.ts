// The JS device for the test registry: always present. Debug mode bounds-checks every access, so a kernel
// that strays faults (code 0) instead of reading NaN.
import type { Device } from "../../backends/device.ts";
import { JsDevice } from "../../backends/js/device.ts";

export function open(): Promise<Device | string> {
  return Promise.resolve(new JsDevice({ debug: true }));
}
