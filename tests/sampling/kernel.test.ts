// The sample kernel against the oracle on every device present (kernel_checks.ts has the cases and the rule).
import { openDevice, selectedBackends } from "../devices/index.ts";
import { kernelTests } from "./kernel_checks.ts";

const devices = [];
for (const backend of selectedBackends()) devices.push({ name: backend, dev: await openDevice(backend), quick: false });
kernelTests(devices);
