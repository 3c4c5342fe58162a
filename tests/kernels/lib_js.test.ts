// Every kernel-library case on the JS device with the caps it reports (one-lane subgroups: scalar path).
import { test } from "node:test";
import { JsDevice } from "../../backends/js/device.ts";
import { cases } from "./cases.ts";
import { assertCase, runCase } from "./harness.ts";

const dev = new JsDevice({ debug: true });
for (const kc of cases) {
  test(`js: ${kc.name}`, async () => assertCase(kc, await runCase(dev, kc)));
}
