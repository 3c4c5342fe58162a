// Split-K attention end to end: attentionPartial then attentionCombine equals the masked [cap] sweep (the
// single-pass case's reference), for several positions (chunks past pos are empty), on one-lane and
// 8-lane-subgroup targets.
import { test } from "node:test";
import { JsDevice } from "../../backends/js/device.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { attentionCase, type AttnCfg } from "./cases.ts";
import { assertCase } from "./harness.ts";

const devices = {
  js: new JsDevice({ debug: true }),
  sg8: new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroupSize: 8, maxWorkgroupSize: 64 } }),
  // A warp-sized subgroup: hd 64 in f16 gives four position groups of 8 lanes (the H200's decode layout).
  sg32: new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroupSize: 32, maxWorkgroupSize: 256 } }),
};
const cfgs: (AttnCfg & { splits: number; unroll?: number })[] = [
  { rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 64, pos: 0, splits: 4 },
  { rows: 1, heads: 4, kvHeads: 2, hd: 16, cap: 64, pos: 37, splits: 4 },
  { rows: 1, heads: 2, kvHeads: 1, hd: 8, cap: 50, pos: 49, splits: 7, kv: "f16" },
  { rows: 4, heads: 3, kvHeads: 3, hd: 10, cap: 33, pos: 20, splits: 3, pt: "i32" },
  // Decode's many-chunk split (a combine over 128 chunks, unrolled) and a deeper position loop unroll; at
  // pos 300 chunks hold 3 positions, at pos 5 all but 6 are empty.
  { rows: 1, heads: 4, kvHeads: 1, hd: 64, cap: 320, pos: 300, splits: 128, unroll: 4, kv: "f16" },
  { rows: 1, heads: 4, kvHeads: 1, hd: 64, cap: 320, pos: 5, splits: 128, unroll: 4, kv: "f16" },
  { rows: 1, heads: 2, kvHeads: 2, hd: 64, cap: 200, pos: 199, splits: 3, unroll: 4, kv: "bf16" },
  // Several query rows over grouped heads: teams ordered (row, kv head, chunk, head of the group).
  { rows: 3, heads: 6, kvHeads: 2, hd: 16, cap: 40, pos: 20, splits: 5, unroll: 2 },
];
for (const [tag, dev] of Object.entries(devices)) {
  for (const c of cfgs) {
    const kc = attentionCase(c);
    test(`${tag}: split-K ${kc.name} splits=${c.splits}${c.unroll ? ` unroll=${c.unroll}` : ""}`, async () => {
      const caps = dev.target.caps;
      const s = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, splits: c.splits, unroll: c.unroll };
      const p1 = lib.attentionPartial(caps, s), p2 = lib.attentionCombine(caps, s);
      const inputs = kc.inputs();
      const bufs = inputs.map((b) => {
        const d = dev.alloc(b.byteLength, "device");
        dev.write(d, 0, b);
        return d;
      });
      const part = dev.alloc(c.rows * c.heads * c.splits * (c.hd + 2) * 4, "device");
      const all = (xs: typeof bufs) => xs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes }));
      const work = { bytes: 0, flops: 0 };
      dev.run([
        { k: "kernel", compiled: dev.compile(p1), grid: p1.grid, work, bindings: all([...bufs.slice(0, 4), part]) },
        { k: "kernel", compiled: dev.compile(p2), grid: p2.grid, work, bindings: all([part, bufs[4]]) },
      ]);
      await dev.synchronize(10_000);
      const outputs = await Promise.all(bufs.map((b) => dev.read(b, 0, b.bytes)));
      assertCase(kc, { inputs, outputs });
    });
  }
}
