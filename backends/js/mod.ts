// The plain-JavaScript backend: JsDevice runs kernels rendered to JavaScript on the host (always present).
import type { Device } from "../device.ts";
import { JsDevice, type JsDeviceOptions } from "./device.ts";
export { JsDevice, type JsDeviceOptions };

/** Opens the JS device (never absent; the backend registry's common entry, backends/open.ts). */
export function open(opts?: JsDeviceOptions): Promise<Device | string> {
  return Promise.resolve(new JsDevice(opts));
}
