// The cooperative-matrix matmul (kernels/lib/coop_matmul.ts) against the float64 reference: on the JS device
// with the matrices emulated (caps.coop forced on; subgroups of 32 and of 8 in lockstep), and on a Vulkan
// device that offers bf16 cooperative matrices (skipped, saying why, where none does: lavapipe has none). Its
// row invariance across row counts and layouts, x as f32 or as words made by mmaPrepX, the SPIR-V it renders
// (capabilities, memory model), and a Llama prefill step lowered onto it (emulated) against the FMA path.
//
// Tolerance: x is rounded once to bf16 (relative error <= 2^-9 per value), the products are exact and the sums
// f32 in the device's order: |got - want| <= (2^-8 + k·2^-23) · Σ|x w| (2^-8 leaves a factor of two on the rounding).
import { test } from "node:test";
import assert from "node:assert/strict";
import { JsDevice } from "../../backends/js/device.ts";
import { type CoopLayout, coopLayout, coopMatmul, coopMatmulFits, type CoopMatmulShape } from "../../kernels/lib/coop_matmul.ts";
import { renderSpirv } from "../../kernels/render/spirv.ts";
import { KernelBuilder } from "../../kernels/ir.ts";
import type { Caps } from "../../kernels/target.ts";
import type { Device } from "../../backends/device.ts";
import { assertCase, runCase, runKernel } from "./harness.ts";
import type { KernelCase } from "./cases.ts";
import { asF32, bytes, floats, matmulWant, Rng } from "./data.ts";
import { bf16ToF32, f32ToBf16 } from "../../graph/half.ts";
import type { BlockDType } from "../../graph/dtype.ts";
import { TINY_LLAMA } from "../ptx/model.ts";
import { logitGap, prefillLogits } from "./mma_cases.ts";
import { caseRest, caseWeights, coopDevices, emulatedCoop, openVulkanWith, tinyLlamaKernels, tinyLlamaStep } from "./coop_cases.ts";

type Shape = Omit<CoopMatmulShape, "w" | "name"> & { layout: CoopLayout; w?: BlockDType };

const emulated = (sg: number): Caps => emulatedCoop(sg);

function coopCase(s: Shape): KernelCase {
  const { n, k, batch } = s, l = s.layout;
  const name = `coop matmul ${s.w ?? "bf16"} n=${n} k=${k} m=${batch} ${l.bm}x${l.bn}x${l.bk ?? 32}/${l.wm}x${l.wn}${s.prepared ? " x words" : ""}${s.bias ? " bias" : ""}${s.residual ? " residual" : ""}`;
  let w: Float64Array;
  let cached: Uint8Array[] | undefined;
  const inputs = () => {
    if (!cached) {
      const rng = new Rng(name);
      // block weights: ggml's quantization of U(-1, 1); the reference reads their exact dequantization
      const f = caseWeights(rng, s.w, n, k);
      w = f.values;
      const x = rng.f32(batch * k);
      // prepared: x as mmaPrepX's unsplit words (bf16 pairs, the even k in the low half)
      const words = Uint32Array.from({ length: (batch * k) / 2 }, (_, i) => (f32ToBf16(x[2 * i]) | (f32ToBf16(x[2 * i + 1]) << 16)) >>> 0);
      cached = [s.prepared ? bytes(words) : bytes(x), f.bytes, ...caseRest(rng, s)];
    }
    return cached.map((b) => b.slice());
  };
  return {
    name,
    make: (caps) => coopMatmul(caps, { ...s, w: s.w ?? "bf16" }),
    inputs,
    expect(ins) {
      const words = new Uint32Array(ins[0].buffer, ins[0].byteOffset, ins[0].byteLength / 4);
      const x = s.prepared ? Float64Array.from({ length: batch * k }, (_, i) => bf16ToF32(words[i >> 1] >>> (16 * (i & 1)))) : asF32(ins[0]);
      const { want, mag } = matmulWant(x, w, s, ins);
      // words hold x exactly: only the f32 sums' rounding is left; block weights are rounded to bf16 as staged
      const rel = (s.prepared ? 0 : 2 ** -8) + (s.w ? 2 ** -8 : 0) + k * 2 ** -23;
      return [{ binding: ins.length - 1, type: "f32", want, mag, tol: { abs: 1e-30, rel } }];
    },
  };
}

/** Every layout, rows and columns off the tile, bias and residual, K of one and of several slices. */
const SHAPES: Shape[] = [
  { n: 40, k: 64, batch: 17, bias: true, residual: true, layout: { bm: 32, bn: 64, wm: 16, wn: 32 } },
  { n: 64, k: 32, batch: 64, layout: { bm: 64, bn: 64, wm: 32, wn: 32 } },
  { n: 200, k: 96, batch: 70, residual: true, layout: { bm: 64, bn: 128, wm: 32, wn: 32 } },
  { n: 136, k: 160, batch: 130, bias: true, layout: { bm: 128, bn: 128, wm: 64, wn: 32 } },
  { n: 136, k: 96, batch: 70, prepared: true, residual: true, layout: { bm: 128, bn: 128, wm: 64, wn: 32 } },
  { n: 40, k: 64, batch: 17, prepared: true, layout: { bm: 32, bn: 64, wm: 16, wn: 32 } },
  { n: 136, k: 192, batch: 70, prepared: true, bias: true, layout: { bm: 128, bn: 128, wm: 64, wn: 32, bk: 64 } },
  { n: 72, k: 128, batch: 33, layout: { bm: 64, bn: 64, wm: 32, wn: 32, bk: 64 } },
  // GGUF blocks: a K slice is one span of the type (32 / 64 / 128 values)
  { w: "q8_0", n: 72, k: 96, batch: 40, prepared: true, residual: true, layout: { bm: 64, bn: 64, wm: 32, wn: 32, bk: 32 } },
  { w: "q4_0", n: 40, k: 64, batch: 17, prepared: true, layout: { bm: 32, bn: 64, wm: 16, wn: 32, bk: 32 } },
  { w: "q4_k", n: 136, k: 512, batch: 70, prepared: true, bias: true, layout: { bm: 128, bn: 128, wm: 64, wn: 32, bk: 64 } },
  { w: "q5_k", n: 64, k: 256, batch: 20, prepared: true, layout: { bm: 32, bn: 64, wm: 16, wn: 32, bk: 64 } },
  { w: "q6_k", n: 72, k: 512, batch: 33, prepared: true, residual: true, layout: { bm: 64, bn: 64, wm: 32, wn: 32, bk: 128 } },
];

// 64-lane subgroups (AMD's wave64): twice the invocations, a slice's staging in a partial round
const devices = coopDevices([["js sg32", emulated(32)], ["js sg8", emulated(8)], ["js sg64", emulated(64)]], openVulkanWith("bf16"));

for (const [label, open, caps, skip] of devices) {
  for (const s of SHAPES) {
    const kc = coopCase(s);
    test(`${label}: ${kc.name}`, { skip, timeout: 120_000 }, async () => {
      assert.ok(coopMatmulFits(caps!, s.w ?? "bf16", s.n, s.k, s.layout), "the layout fits");
      const dev = open();
      assertCase({ ...kc, make: () => kc.make(caps!) }, await runCase(dev, { ...kc, make: () => kc.make(caps!) }));
    });
  }
  test(`${label}: a row has the same bits alone, in 70 rows and under every layout`, { skip, timeout: 120_000 }, async () => {
    const dev = open(), n = 72, k = 64, rng = new Rng("coop invariance");
    const x = rng.f32(70 * k), wb = floats(rng, "bf16", n * k).bytes;
    const run = async (rows: number, layout: CoopLayout) => {
      const kernel = coopMatmul(caps!, { n, k, batch: rows, w: "bf16", layout });
      const out = await runKernel(dev, kernel, [bytes(x.slice(0, rows * k)), wb.slice(), bytes(new Float32Array(rows * n))]);
      return new Uint32Array(out[2].buffer, out[2].byteOffset, rows * n);
    };
    const layouts = ([
      { bm: 32, bn: 64, wm: 16, wn: 32 }, { bm: 64, bn: 64, wm: 32, wn: 32 }, { bm: 128, bn: 128, wm: 64, wn: 32 }, { bm: 64, bn: 128, wm: 32, wn: 32, bk: 64 },
    ] as CoopLayout[]).filter((l) => coopMatmulFits(caps!, "bf16", n, k, l));
    assert.ok(layouts.length >= 2, `${layouts.length} layouts fit`);
    const base = await run(70, layouts[0]);
    for (const l of layouts) {
      for (const rows of [1, 37, 70]) {
        const got = await run(rows, l);
        assert.deepEqual(got, base.subarray(0, rows * n), `rows ${rows}, layout ${JSON.stringify(l)}`);
      }
    }
  });
}

test("coopLayout: big chunks take 128 x 128 tiles, small ones the tiles that fill the GPU, none without bf16 coop", () => {
  const caps = emulated(32);
  assert.deepEqual(coopLayout(caps, 512, 8192, 2048), { bm: 128, bn: 128, wm: 64, wn: 32, bk: 64 });
  assert.deepEqual(coopLayout(caps, 512, 2048, 2048), { bm: 64, bn: 64, wm: 32, wn: 32, bk: 64 });
  assert.deepEqual(coopLayout(caps, 512, 2048, 2080), { bm: 64, bn: 64, wm: 32, wn: 32, bk: 32 }, "k not a multiple of 64");
  assert.equal(coopLayout({ ...caps, coop: { bf16: false, f16: true } }, 512, 2048, 2048), undefined);
  assert.equal(coopLayout(caps, 512, 2048, 2040), undefined, "k not a multiple of 32");
});

test("spirv: a cooperative-matrix kernel declares the Vulkan memory model, the KHR matrices and bfloat16", () => {
  const caps = { ...emulated(32), storage16: true, f16: true };
  const sh = renderSpirv(coopMatmul(caps, { n: 64, k: 64, batch: 32, w: "bf16" }), caps);
  assert.equal(sh.needs.coop, true);
  const w = sh.words;
  // OpCapability (17) operands and OpMemoryModel (14)'s model
  const caps2: number[] = [];
  let model = -1;
  for (let i = 5; i < w.length;) {
    const op = w[i] & 0xffff, len = w[i] >>> 16;
    if (op === 17) caps2.push(w[i + 1]);
    if (op === 14) model = w[i + 2];
    i += len;
  }
  for (const c of [6022, 5345, 5116, 5118]) assert.ok(caps2.includes(c), `capability ${c}`);
  assert.equal(model, 3, "MemoryModel VulkanKHR");
  assert.throws(() => renderSpirv(coopMatmul(caps, { n: 64, k: 64, batch: 32, w: "bf16" }), { ...caps, coop: undefined }), /caps\.coop/);
});

test("lowering: a 20-row Llama chunk's bf16 matmuls run on cooperative matrices where caps.coop, x prepared once per input", () => {
  const names = tinyLlamaKernels;
  const on = names(emulated(32)), off = names({ ...emulated(32), coop: undefined });
  // per layer q, k, v, o, gate, up (the down projection's k = 344 is no multiple of 32) and the head
  assert.equal(on.filter((n) => n.startsWith("coop_matmul")).length, 6 * TINY_LLAMA.layers + 1, on.join(" "));
  // q/k/v share one x, gate/up another; o its own; the head's
  assert.equal(on.filter((n) => n.startsWith("mma_prep")).length, 3 * TINY_LLAMA.layers + 1, on.join(" "));
  assert.ok(!off.some((n) => n.startsWith("coop_") || n.startsWith("mma_")), off.join(" "));
  assert.ok(!names(emulated(32), 8).some((n) => n.startsWith("coop_")), "an 8-row chunk keeps the FMA kernels");
});

test("a 20-row Llama prefill on (emulated) cooperative matrices equals the FMA path within bf16's precision", { timeout: 120_000 }, async () => {
  const m = tinyLlamaStep(20);
  const b = await prefillLogits(m, 20, TINY_LLAMA.vocab, { ...emulated(32), coop: undefined });
  const a = await prefillLogits(m, 20, TINY_LLAMA.vocab, emulated(32));
  const { worst, scale } = logitGap(a, b);
  // x rounded once to bf16 (8 significant bits) as in mma_model.test.ts: measured in the low 1e-3 of the range
  assert.ok(worst <= 2 ** 8 * 1e-4 * scale, `max |coop - fma| = ${worst} of logits up to ${scale}`);
  assert.ok(worst > 0, "the coop path ran the same kernels as the FMA path");
});

test("pack2 (the operands' rounding) on Vulkan gives the JS device's bits: f16 by OpFConvert, bf16 in integers", async (t) => {
  const any = openVulkanWith("any");
  if (typeof any === "string") return t.skip(any);
  const b = new KernelBuilder("pack2_words", { workgroup: 64, grid: 1 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "u32", "w");
  const i = b.lid.x;
  b.store(y, i, b.pack2("f16", b.load(x, i.mul(2)), b.load(x, i.mul(2).add(1))));
  b.store(y, i.add(64), b.pack2("bf16", b.load(x, i.mul(2).add(128)), b.load(x, i.mul(2).add(129))));
  const kernel = b.build();
  // ties at both precisions, subnormal halves, overflow, signs, infinities
  const rng = new Rng("pack2 words");
  const vals = Float32Array.from({ length: 256 }, (_, j) =>
    j % 128 < 8 ? [1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520, -65519, 2 ** -20, -(2 ** -24) * 1.5, Infinity, -Infinity][j % 128]
    : j % 128 < 12 ? [1 + 2 ** -8, 1 + 3 * 2 ** -8, 3e38, -1e-40][j % 128 - 8] : (rng.f32(1, -4, 4)[0] * 2 ** ((j % 20) - 10)));
  // bf16's NaNs keep their sign and top payload bits, made quiet (f16's NaN payloads are the driver's)
  new Uint32Array(vals.buffer).set([0x7f800001, 0xffc00001, 0x7fffffff, 0xff80ffff], 140);
  const run = async (dev: Device) => {
    const out = await runKernel(dev, kernel, [bytes(vals), new Uint8Array(128 * 4)]);
    return new Uint32Array(out[1].buffer, out[1].byteOffset, 128);
  };
  const got = await run(any);
  assert.deepEqual(got, await run(new JsDevice({ debug: true })));
  assert.deepEqual([...got.subarray(70, 72)], [0xffc07fc0, 0xffc07fff]);
});
