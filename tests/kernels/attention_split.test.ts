// Split-K attention end to end: attentionPartial then attentionCombine equals the masked [cap] sweep (the
// single-pass case's reference), for several positions (chunks past pos are empty), on one-lane and
// 8-lane-subgroup targets. Then the fused kernel (one dispatch) against those two, bit for bit (see below).
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device, DeviceBuffer } from "../../backends/device.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { type Caps, JS_CAPS } from "../../kernels/target.ts";
import * as lib from "../../kernels/lib/mod.ts";
import { attentionCase, type AttnCfg } from "./cases.ts";
import { assertCase } from "./harness.ts";
import { openDevice, softwareShare } from "../devices/index.ts";

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
  // The decode plans' layout on a warp-sized device: 32 chunks over f16 K/V (whole workgroups of teams, so
  // the fused kernel takes it on every subgroup size here).
  { rows: 1, heads: 8, kvHeads: 2, hd: 64, cap: 512, pos: 300, splits: 32, kv: "f16" },
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

/**
 * Whether attentionFused combines row r's items in their workgroup (Fused.local): a workgroup of W > 1 teams holds
 * whole items, or an item's chunks W at a time (W a power of two up to 32), and the row's chunks with positions
 * number at most W.
 */
function combinesLocally(caps: Caps, c: AttnCfg & { splits: number; unroll?: number }, r: number): boolean {
  const s = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, splits: c.splits, unroll: c.unroll };
  const S = c.splits, W = lib.team(caps, { rows: c.rows * c.heads * S }).rows;
  if (W <= 1 || (W % S !== 0 && (S % W !== 0 || W > 32 || (W & (W - 1)) !== 0))) return false;
  const len = c.pos + r + 1, share = Math.ceil(len / lib.liveChunks(len, S, lib.attentionChunking(caps, s)));
  return Math.ceil(len / share) <= W;
}

// The fused kernel (lib.attentionFused: partials, a device barrier, a count per item, the last team combines)
// against the two-kernel path on the same device: bit-identical (the same operations in the same order), run
// twice so the second dispatch finds the counters its first zeroed; the cases take both the workgroup-local
// combine (short contexts: the partials stay in shared memory) and the last team's. On the JS devices here, and on Vulkan and
// WebGPU where present (the targets that use it; the counters and barriers are theirs to honour).

const gpus = await Promise.all((["vulkan", "wgpu"] as const).map(async (n): Promise<[string, Device | string]> => [n, await openDevice(n)]));
const fusedOn: [string, Device | string][] = [["sg8", devices.sg8], ["sg32", devices.sg32], ...gpus];
// Each variant: count "team" (lane 0 counts for its team; lib.FusedCount) wants a device-scope barrier, so not on
// WGSL; skipEmpty (empty chunks neither write nor count) anywhere.
const variants = [["lane", false], ["team", false], ["lane", true], ["team", true]] as const;
// The other variants take three layouts (position 0 of 4 chunks, several query rows, the decode plans' 32
// chunks), and on sg8 also 128 chunks at position 5 (all but 6 empty): CI time.
const VARIANT_CFGS = new Set([cfgs[0], cfgs[3], cfgs[cfgs.length - 1]]);
const counted = fusedOn.flatMap(([tag, dev]) => variants.filter(([n]) => n === "lane" || tag !== "wgpu").map(([n, skip]) => [tag, dev, n, skip] as const));
for (const [tag, dev, count, skipEmpty] of counted) {
  for (const c of cfgs) {
    const kc = attentionCase(c);
    const caps = typeof dev === "string" ? undefined : dev.target.caps;
    const s = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, splits: c.splits, unroll: c.unroll, count, skipEmpty };
    // (a GPU device skips the 128-chunk cases: past the planner's 64, and lavapipe's JIT takes ~10 s over them)
    const gpu = tag !== "sg8" && tag !== "sg32";
    const skip = typeof dev === "string" ? dev : !caps!.subgroups ? `${tag}: no subgroups` : lib.attentionFusable(caps!, s) ||
      (gpu && c.splits > 64 ? `${tag}: the planner never splits in more than 64` : false) ||
      ((count !== "lane" || skipEmpty) && !VARIANT_CFGS.has(c) && !(tag === "sg8" && c === cfgs[5]) ? `${tag}: this variant runs a few layouts` : false);
    test(`${tag}: fused split-K (count per ${count}${skipEmpty ? ", empty chunks skipped" : ""}) ${kc.name} splits=${c.splits} == partial + combine, bit for bit, twice`, { skip }, async () => {
      const d = dev as Device;
      const p1 = lib.attentionPartial(caps!, s), p2 = lib.attentionCombine(caps!, s), f = lib.attentionFused(caps!, s);
      const inputs = kc.inputs();
      const bufs = inputs.map((b) => {
        const x = d.alloc(b.byteLength, "device");
        d.write(x, 0, b);
        return x;
      });
      const outBytes = inputs[4].byteLength;
      const part = d.alloc(c.rows * c.heads * c.splits * (c.hd + 2) * 4, "device");
      const fpart = d.alloc(lib.attentionFusedBytes(s), "device"), fout = d.alloc(outBytes, "device");
      // partials NaN (a chunk the fused kernel reads without its team having written it shows), counters zero
      const init = new Uint8Array(fpart.bytes).fill(0xff);
      init.fill(0, fpart.bytes - 4 * c.rows * c.heads);
      d.write(fpart, 0, init);
      const all = (xs: typeof bufs) => xs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes }));
      const work = { bytes: 0, flops: 0 };
      const fused = { k: "kernel" as const, compiled: d.compile(f), grid: f.grid, work, bindings: all([...bufs.slice(0, 4), fpart, fout]) };
      try {
        d.run([
          { k: "kernel", compiled: d.compile(p1), grid: p1.grid, work, bindings: all([...bufs.slice(0, 4), part]) },
          { k: "kernel", compiled: d.compile(p2), grid: p2.grid, work, bindings: all([part, bufs[4]]) },
          fused,
        ]);
        await d.synchronize(60_000);
        const want = await d.read(bufs[4], 0, outBytes);
        // an item combined in its workgroup (Fused.local) leaves its partials as they were: NaN
        const parts = new Float32Array((await d.read(fpart, 0, fpart.bytes)).slice().buffer);
        const written = Array.from({ length: c.rows * c.heads }, (_, it) => !Number.isNaN(parts[it * c.splits * (c.hd + 2)]));
        assert.deepEqual(written, Array.from({ length: c.rows * c.heads }, (_, it) => !combinesLocally(caps!, c, Math.floor(it / c.heads))), "which items took the workgroup-local combine");
        for (const round of [1, 2]) {
          const got = await d.read(fout, 0, outBytes);
          assert.deepEqual(got, want, `round ${round}: fused output differs`);
          const counters = new Uint32Array((await d.read(fpart, 0, fpart.bytes)).buffer).slice(-c.rows * c.heads);
          assert.deepEqual([...counters], new Array(c.rows * c.heads).fill(0), `round ${round}: counters left non-zero`);
          if (round === 1) {
            d.write(fout, 0, new Uint8Array(outBytes));
            d.run([fused]);
            await d.synchronize(60_000);
          }
        }
      } finally {
        for (const b of [...bufs, part, fpart, fout]) d.free(b);
      }
    });
  }
}

// Grouped heads (AttentionShape.group: a team computes several query heads of one KV head from each K/V row it
// loads): every head's partial is bit-identical to the one-head-per-team kernel's, as the lowering relies on when
// it groups by row count (serving: a row's result must not depend on the batch). Partials compared whole, m and l
// included, on the JS devices and on each GPU present.
const grouped: [string, Device | string][] = [["js", devices.js], ["sg8", devices.sg8], ["sg32", devices.sg32],
  ...gpus, ["ptx", await openDevice("ptx")]];
for (const [tag, dev] of grouped) {
  for (const c of cfgs.filter((c) => c.heads > c.kvHeads && c.splits <= 64)) {
    const kc = attentionCase(c);
    for (const g of [2, c.heads / c.kvHeads].filter((g, i, a) => (c.heads / c.kvHeads) % g === 0 && a.indexOf(g) === i)) {
      test(`${tag}: split-K ${kc.name} splits=${c.splits}, ${g} heads per team == one per team, bit for bit`, { skip: typeof dev === "string" ? dev : false }, async () => {
        const d = dev as Device, caps = d.target.caps;
        const s = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, splits: c.splits, unroll: c.unroll };
        const one = lib.attentionPartial(caps, s), many = lib.attentionPartial(caps, { ...s, group: g });
        const inputs = kc.inputs();
        const bufs = inputs.slice(0, 4).map((b) => {
          const x = d.alloc(b.byteLength, "device");
          d.write(x, 0, b);
          return x;
        });
        const bytes = c.rows * c.heads * c.splits * (c.hd + 2) * 4;
        const parts = [d.alloc(bytes, "device"), d.alloc(bytes, "device")];
        const all = (xs: typeof bufs) => xs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes }));
        const work = { bytes: 0, flops: 0 };
        try {
          d.run([one, many].map((k, i) => ({ k: "kernel" as const, compiled: d.compile(k), grid: k.grid, work, bindings: all([...bufs, parts[i]]) })));
          await d.synchronize(60_000);
          const [want, got] = await Promise.all(parts.map((p) => d.read(p, 0, bytes)));
          assert.ok(new Float32Array(want.buffer).some((x) => x !== 0), "the partials are not all zero");
          assert.deepEqual(got, want);
        } finally {
          for (const b of [...bufs, ...parts]) d.free(b);
        }
      });
    }
  }
}

// The fused kernel writing the o projection's prepared x (lib.FusedPrep: its combining team quantizes the item's
// values into xq_layout.ts's runs) against the fused kernel then xqPrep on its f32 output: the same words, scales
// and sums bit for bit, for each weight type whose runs keep to a head (runsPerItem), over the workgroup-local
// combine (short context) and the last team's, twice (the counters).
const PREP_CFGS: (AttnCfg & { splits: number })[] = [
  { rows: 1, heads: 8, kvHeads: 2, hd: 64, cap: 512, pos: 40, splits: 32, kv: "f16" },
  { rows: 1, heads: 8, kvHeads: 2, hd: 64, cap: 512, pos: 400, splits: 32, kv: "f16" },
  { rows: 1, heads: 4, kvHeads: 2, hd: 128, cap: 512, pos: 7, splits: 32, kv: "f16" },
  { rows: 1, heads: 4, kvHeads: 2, hd: 128, cap: 512, pos: 300, splits: 32, kv: "f16" },
];
const PREP_TYPES = ["q8_0", "q4_0", "q4_k", "q5_k", "q6_k"] as const;
for (const [tag, dev] of fusedOn) {
  for (const c of PREP_CFGS) {
    const kc = attentionCase(c);
    const caps = typeof dev === "string" ? undefined : dev.target.caps;
    const s = { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, splits: c.splits };
    const k = c.heads * c.hd;
    // (a GPU device takes one layout of each path, hd 64 local and hd 128 last team: lavapipe's and Naga's JIT of
    // 20 kernels a layout is most of the test's CI time; the JS devices take all four)
    const gpu = tag !== "sg8" && tag !== "sg32";
    const skip = typeof dev === "string" ? dev : !caps!.subgroups ? `${tag}: no subgroups` : lib.attentionFusable(caps!, s) ||
      (gpu && (c === PREP_CFGS[1] || c === PREP_CFGS[2]) ? `${tag}: a GPU device runs two of the layouts (CI time)` : false);
    test(`${tag}: fused split-K writing the prepared x (${PREP_TYPES.join(", ")}) ${kc.name} == fused + xqPrep, bit for bit, twice`, { skip }, async () => {
      const d = dev as Device;
      const types = PREP_TYPES.filter((w) => !lib.attentionPreps(caps!, { ...s, prep: { w, k } }));
      // q6_k's runs span 128 values: not at hd 64; every other type here fits
      assert.deepEqual(types, PREP_TYPES.filter((w) => w !== "q6_k" || c.hd % 128 === 0), "the types attentionPreps allows");
      const inputs = kc.inputs();
      const bufs = inputs.slice(0, 4).map((b) => {
        const x = d.alloc(b.byteLength, "device");
        d.write(x, 0, b);
        return x;
      });
      const fresh = () => {
        const p = d.alloc(lib.attentionFusedBytes(s), "device");
        d.write(p, 0, new Uint8Array(p.bytes));
        return p;
      };
      const f = lib.attentionFused(caps!, s), fpart = fresh(), fout = d.alloc(inputs[4].byteLength, "device");
      const all = (xs: DeviceBuffer[]) => xs.map((buffer) => ({ buffer, offset: 0, bytes: buffer.bytes }));
      const work = { bytes: 0, flops: 0 };
      const made: DeviceBuffer[] = [...bufs, fpart, fout];
      try {
        d.run([{ k: "kernel", compiled: d.compile(f), grid: f.grid, work, bindings: all([...bufs, fpart, fout]) }]);
        // (on lavapipe the vulkan and wgpu backends take alternate types: tests/devices/index.ts softwareShare)
        for (const w of softwareShare(d, types)) {
          const bytes = lib.xqLayout(w, k, false).total * 4;
          const prep = lib.xqPrep(caps!, { k, w }), fp = lib.attentionFused(caps!, { ...s, prep: { w, k } });
          const want = d.alloc(bytes, "device"), got = d.alloc(bytes, "device"), ppart = fresh();
          made.push(want, got, ppart);
          d.write(got, 0, new Uint8Array(bytes).fill(0xa5));
          const fused = { k: "kernel" as const, compiled: d.compile(fp), grid: fp.grid, work, bindings: all([...bufs, ppart, got]) };
          d.run([{ k: "kernel", compiled: d.compile(prep), grid: prep.grid, work, bindings: all([fout, want]) }, fused]);
          await d.synchronize(60_000);
          const ref = await d.read(want, 0, bytes);
          assert.ok(new Uint32Array(ref.slice().buffer).some((x) => x !== 0), `${w}: the prepared x is not all zero`);
          for (const round of [1, 2]) {
            assert.deepEqual(await d.read(got, 0, bytes), ref, `${w}, round ${round}: the fused prep differs`);
            const counters = new Uint32Array((await d.read(ppart, 0, ppart.bytes)).slice().buffer).slice(-c.heads);
            assert.deepEqual([...counters], new Array(c.heads).fill(0), `${w}, round ${round}: counters left non-zero`);
            if (round === 1) {
              d.write(got, 0, new Uint8Array(bytes).fill(0x5a));
              d.run([fused]);
              await d.synchronize(60_000);
            }
          }
        }
      } finally {
        for (const b of made) d.free(b);
      }
    });
  }
}
