// The one-dispatch argmax of long rows (lib.argmaxFused: candidates, a device barrier, a count per row, the last
// workgroup's first subgroup merges) against argmaxPartial + argmaxCombine on the same device, exactly, run twice
// so the second dispatch finds the counters its first zeroed: rows with ties (the first index must win), a NaN
// (the first NaN wins), all -inf. On JS devices with 8- and 32-lane subgroups, and on Vulkan and WebGPU where
// present (the targets whose plans use it).
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { openDevice } from "../devices/index.ts";
import { rng } from "../rng.ts";

const js = (sg: number) => new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroupSize: sg, maxWorkgroupSize: 256 } });
const gpus = await Promise.all((["vulkan", "wgpu"] as const).map(async (n): Promise<[string, Device | string]> => [n, await openDevice(n)]));
const devices: [string, Device | string][] = [["sg8", js(8)], ["sg32", js(32)], ...gpus];

function rows(kind: string, r: number, n: number): Float32Array {
  const g = rng(r * 7 + n), x = new Float32Array(r * n);
  for (let i = 0; i < x.length; i++) x[i] = Math.round((g() - 0.5) * 40); // many ties
  for (let i = 0; i < r; i++) {
    if (kind === "nan") x[i * n + 15000] = NaN, x[i * n + 16001] = NaN;
    if (kind === "inf") x.fill(-Infinity, i * n, (i + 1) * n);
    if (kind === "ties") x[i * n + 3] = 100, x[i * n + n - 2] = 100;
  }
  return x;
}
const CASES: [string, number, number][] = [["ties", 1, 20000], ["nan", 3, 17000], ["inf", 2, 16500], ["random", 1, 151936]];

for (const [tag, dev] of devices) {
  for (const [kind, r, n] of CASES) {
    const caps = typeof dev === "string" ? undefined : dev.target.caps;
    const skip = typeof dev === "string" ? dev : lib.argmaxFusable(caps!, { rows: r, n }) || (tag.startsWith("sg") && n > 20000 ? "the JS device is slow over a vocab" : false);
    test(`${tag}: fused argmax of ${r}x${n} (${kind}) == partial + combine, twice`, { skip }, async () => {
      const d = dev as Device;
      const x = rows(kind, r, n);
      const p1 = lib.argmaxPartial(caps!, { rows: r, n }), p2 = lib.argmaxCombine(caps!, { rows: r, n, out: "i32" });
      const f = lib.argmaxFused(caps!, { rows: r, n, out: "i32" });
      const alloc = (bytes: number, init?: Uint8Array) => {
        const b = d.alloc(bytes, "device");
        d.write(b, 0, init ?? new Uint8Array(bytes));
        return b;
      };
      const xb = alloc(x.byteLength, new Uint8Array(x.buffer)), part = alloc(r * lib.argmaxChunks(n).parts * 8), want = alloc(4 * r);
      const fpart = alloc(lib.argmaxFusedBytes({ rows: r, n })), got = alloc(4 * r);
      const all = (xs: typeof xb[]) => xs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes }));
      const work = { bytes: 0, flops: 0 };
      const fused = { k: "kernel" as const, compiled: d.compile(f), grid: f.grid, work, bindings: all([xb, fpart, got]) };
      try {
        d.run([
          { k: "kernel", compiled: d.compile(p1), grid: p1.grid, work, bindings: all([xb, part]) },
          { k: "kernel", compiled: d.compile(p2), grid: p2.grid, work, bindings: all([part, want]) },
          fused,
        ]);
        await d.synchronize(60_000);
        const w = new Int32Array((await d.read(want, 0, 4 * r)).buffer);
        for (const round of [1, 2]) {
          assert.deepEqual([...new Int32Array((await d.read(got, 0, 4 * r)).buffer)], [...w], `round ${round}`);
          const tail = new Uint32Array((await d.read(fpart, 0, fpart.bytes)).buffer).slice(-r);
          assert.deepEqual([...tail], new Array(r).fill(0), `round ${round}: counters left non-zero`);
          if (round === 1) {
            d.write(got, 0, new Uint8Array(4 * r).fill(0xff));
            d.run([fused]);
            await d.synchronize(60_000);
          }
        }
        if (kind === "ties") assert.deepEqual([...w], [3]);
        if (kind === "nan") assert.deepEqual([...w], [15000, 15000, 15000]);
      } finally {
        for (const b of [xb, part, want, fpart, got]) d.free(b);
      }
    });
  }
}
