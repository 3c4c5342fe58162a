// Paged split-K attention with the chunk's block-table entries held in lanes (AttentionShape.tableInLanes: lane i
// loads the entry of the chunk's i-th block once, positions take theirs by shuffle) against the per-position table
// loads it replaces: the partials bit for bit, rows at different positions over shuffled blocks; and the same faults
// (an out-of-range entry in a block a row reads faults PAGED_BLOCK, one past the row's positions does not). On
// subgroup JS devices (8 and 32 lanes) and each GPU present; the fault cases on fresh JS devices only (a fault
// poisons its device). Loading each trip's successor's K/V ahead (AttentionShape.prefetch) likewise gives the same
// bits and the same faults.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device, DeviceBuffer } from "../../backends/device.ts";
import { KernelFault } from "../../backends/errors.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { JS_CAPS } from "../../kernels/target.ts";
import type { Caps } from "../../kernels/target.ts";
import { FAULT } from "../../kernels/lib/codes.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { openDevice } from "../devices/index.ts";
import { rng } from "../rng.ts";

const sg = (lanes: number): Caps => ({ ...JS_CAPS, subgroupSize: lanes, maxWorkgroupSize: 8 * lanes });
const devices: [string, Device | string][] = [
  ["sg8", new JsDevice({ debug: true, caps: sg(8) })],
  ["sg32", new JsDevice({ debug: true, caps: sg(32) })],
  ...await Promise.all((["vulkan", "wgpu", "ptx"] as const).map(async (n): Promise<[string, Device | string]> => [n, await openDevice(n)])),
];

interface Cfg {
  rows: number;
  heads: number;
  kvHeads: number;
  hd: number;
  block: number;
  maxBlocks: number;
  splits: number;
  pos: number[];
  kv: "f32" | "f16";
}
const cfgs: Cfg[] = [
  { rows: 3, heads: 4, kvHeads: 2, hd: 16, block: 4, maxBlocks: 16, splits: 4, pos: [63, 5, 30], kv: "f32" },
  { rows: 2, heads: 8, kvHeads: 2, hd: 64, block: 16, maxBlocks: 10, splits: 3, pos: [150, 17], kv: "f16" },
];

/** Inputs: q, the K and V pool, each row's table over a shuffled set of pool blocks, positions; the partials. */
function inputs(c: Cfg, r: () => number): Uint8Array[] {
  const poolBlocks = c.rows * c.maxBlocks + 3, poolRows = poolBlocks * c.block;
  const q = Float32Array.from({ length: c.rows * c.heads * c.hd }, () => r() * 2 - 1);
  const kvn = poolRows * c.kvHeads * c.hd;
  const half = (n: number) => Uint16Array.from({ length: n }, () => 0x3000 + Math.floor(r() * 0x1000) + (r() < 0.5 ? 0x8000 : 0));
  const kv = (n: number) => c.kv === "f16" ? half(n) : Float32Array.from({ length: n }, () => r() * 2 - 1);
  const order = Array.from({ length: poolBlocks }, (_, i) => i).sort(() => r() - 0.5);
  const table = Int32Array.from({ length: c.rows * c.maxBlocks }, (_, i) => order[i]);
  const pos = Int32Array.from(c.pos);
  const part = new Float32Array(c.rows * c.heads * c.splits * (c.hd + 2)).fill(NaN);
  return [q, kv(kvn), kv(kvn), table, pos, part].map((a) => new Uint8Array(a.buffer.slice(0)));
}
const shapeOf = (c: Cfg, tableInLanes: boolean, prefetch = false) => ({
  rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, poolRows: (c.rows * c.maxBlocks + 3) * c.block, block: c.block,
  maxBlocks: c.maxBlocks, kv: c.kv, pos: "i32" as const, table: "i32" as const, splits: c.splits, tableInLanes, prefetch,
});

/** The partials of one dispatch, or its KernelFault. */
async function run(d: Device, c: Cfg, ins: Uint8Array[], tableInLanes: boolean, prefetch = false): Promise<Uint8Array | KernelFault> {
  const k = lib.pagedAttentionPartial(d.target.caps, shapeOf(c, tableInLanes, prefetch));
  const bufs: DeviceBuffer[] = ins.map((b) => {
    const x = d.alloc(b.byteLength, "device");
    d.write(x, 0, b);
    return x;
  });
  try {
    d.run([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: bufs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes })) }]);
    try {
      await d.synchronize(60_000);
    } catch (e) {
      if (e instanceof KernelFault) return e;
      throw e;
    }
    return await d.read(bufs[5], 0, bufs[5].bytes);
  } finally {
    for (const b of bufs) d.free(b);
  }
}

for (const [tag, dev] of devices) {
  for (const c of cfgs) {
    const what = `rows=${c.rows} heads=${c.heads}/${c.kvHeads} hd=${c.hd} block=${c.block} splits=${c.splits} pos=${c.pos.join("/")} ${c.kv}`;
    test(`${tag}: paged split-K ${what}: table entries in lanes == loaded per position, bit for bit`, { skip: typeof dev === "string" ? dev : false }, async () => {
      const d = dev as Device, ins = inputs(c, rng(7));
      const want = await run(d, c, ins, false), got = await run(d, c, ins, true);
      assert.ok(want instanceof Uint8Array && got instanceof Uint8Array, "no fault");
      const w = new Float32Array(want.buffer);
      assert.ok(w.every((x, i) => (i % (c.hd + 2) === 0 ? !Number.isNaN(x) : Number.isFinite(x))), "every partial written, finite");
      assert.deepEqual(got, want);
    });
    test(`${tag}: paged split-K ${what}: next trip's K/V loaded ahead == in turn, bit for bit (both table layouts)`, { skip: typeof dev === "string" ? dev : false }, async () => {
      const d = dev as Device, ins = inputs(c, rng(7));
      for (const inLanes of [false, true]) {
        const want = await run(d, c, ins, inLanes), got = await run(d, c, ins, inLanes, true);
        assert.ok(want instanceof Uint8Array && got instanceof Uint8Array, "no fault");
        assert.deepEqual(got, want, `tableInLanes ${inLanes}`);
      }
    });
  }
}

for (const lanes of [8, 32]) {
  const c = cfgs[0];
  for (const [where, row, block, faults] of [["a block row 1 reads", 1, 1, true], ["past row 1's positions", 1, 3, false]] as const) {
    test(`sg${lanes}: paged split-K with an out-of-range table entry ${where}: ${faults ? "faults PAGED_BLOCK" : "no fault"}, both ways`, async () => {
      for (const [inLanes, prefetch] of [[false, false], [true, false], [true, true]]) {
        const ins = inputs(c, rng(7));
        new Int32Array(ins[3].buffer)[row * c.maxBlocks + block] = c.rows * c.maxBlocks + 3; // one past the pool
        const r = await run(new JsDevice({ debug: true, caps: sg(lanes) }), c, ins, inLanes, prefetch);
        const how = `tableInLanes ${inLanes} prefetch ${prefetch}`;
        if (faults) assert.ok(r instanceof KernelFault && r.code === FAULT.PAGED_BLOCK, `${how}: ${r instanceof KernelFault ? r.message : "no fault"}`);
        else assert.ok(r instanceof Uint8Array, `${how}: ${r instanceof KernelFault ? r.message : ""}`);
      }
    });
  }
}
