// The cooperative-matrix prefill attention (kernels/lib/coop_flash.ts) against attention()'s float64 reference:
// on the JS device with the matrices emulated (caps.coop forced on; subgroups of 32 and 16 in lockstep, f16 and
// bf16 operands), and on a Vulkan device that offers cooperative matrices (skipped, saying why, where none does).
// Cache rows past the chunk hold NaN, as an unwritten cache may. The lowering picks it for prefill chunks.
//
// Tolerance: q·scale, K, V and P are rounded once to the operand type (f16: 2^-11 relative, bf16: 2^-8), the
// scores' error grows with |q|·|k|·hd; flash.ts's unsplit bound (4e-3 of the magnitude) for f16, 8x that for bf16.
import { test } from "node:test";
import { coopFlash } from "../../kernels/lib/coop_flash.ts";
import type { Caps } from "../../kernels/target.ts";
import { assertCase, runCase } from "./harness.ts";
import { type AttnCfg, attentionCase, type KernelCase } from "./cases.ts";
import assert from "node:assert/strict";
import { TINY_LLAMA } from "../ptx/model.ts";
import { logitGap, prefillLogits } from "./mma_cases.ts";
import { coopDevices, emulatedCoop, openVulkanWith, tinyLlamaKernels, tinyLlamaStep } from "./coop_cases.ts";

const emulated = (sg: number, coop: Caps["coop"] = { bf16: true, f16: true }): Caps => emulatedCoop(sg, coop);

/** attention()'s case with the cache rows past pos + rows set to NaN (unwritten), on the coop kernel. */
function flashCase(c: AttnCfg, caps: Caps): KernelCase {
  const base = attentionCase(c);
  const esize = { f32: 4, f16: 2, bf16: 2 }[c.kv ?? "f32"];
  const row = c.kvHeads * c.hd * esize;
  return {
    ...base,
    name: `coop flash ${base.name}`,
    make: () => coopFlash(caps, { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt }),
    inputs() {
      const ins = base.inputs();
      for (const buf of [ins[1], ins[2]]) {
        const nan = c.kv === "f32" || c.kv === undefined ? new Uint8Array(new Float32Array([NaN]).buffer) : new Uint8Array([0x00, 0x7e]);
        for (let at = (c.pos + c.rows) * row; at < buf.byteLength; at += esize) buf.set(nan, at);
      }
      return ins;
    },
    expect(ins) {
      const rel = caps.coop!.f16 ? 4e-3 : 3.2e-2;
      return base.expect(ins).map((x) => ({ ...x, tol: { abs: 1e-5, rel } }));
    },
  };
}

const CFGS: AttnCfg[] = [
  { rows: 16, heads: 4, kvHeads: 1, hd: 16, cap: 40, pos: 0 },
  { rows: 37, heads: 4, kvHeads: 2, hd: 64, cap: 200, pos: 20, pt: "i32" },
  { rows: 70, heads: 2, kvHeads: 2, hd: 32, cap: 160, pos: 9, kv: "f16" },
  { rows: 20, heads: 3, kvHeads: 1, hd: 128, cap: 64, pos: 30, kv: "bf16" },
];

const devices = coopDevices([
  ["js sg32 f16", emulated(32)], ["js sg16 bf16", emulated(16, { bf16: true, f16: false })], ["js sg64 f16", emulated(64)],
], openVulkanWith("coop"));

for (const [label, open, caps, skip] of devices) {
  for (const c of CFGS) {
    const kc = caps ? flashCase(c, caps) : { ...attentionCase(c), name: `coop flash ${attentionCase(c).name}` };
    test(`${label}: ${kc.name}`, { skip, timeout: 120_000 }, async () => assertCase(kc, await runCase(open(), kc)));
  }
}

test("lowering: a 20-row chunk's attention runs on cooperative matrices where caps.coop, not without or at 8 rows", () => {
  const names = tinyLlamaKernels;
  assert.equal(names(emulated(32)).filter((n) => n.startsWith("coop_flash")).length, TINY_LLAMA.layers);
  assert.ok(!names({ ...emulated(32), coop: undefined }).some((n) => n.startsWith("coop_")));
  assert.ok(!names(emulated(32), 8).some((n) => n.startsWith("coop_")));
});

test("a 20-row Llama prefill with attention and matmuls on (emulated) cooperative matrices equals the FMA path within their precision", { timeout: 120_000 }, async () => {
  const m = tinyLlamaStep(20);
  const b = await prefillLogits(m, 20, TINY_LLAMA.vocab, { ...emulated(32), coop: undefined });
  const a = await prefillLogits(m, 20, TINY_LLAMA.vocab, emulated(32));
  const { worst, scale } = logitGap(a, b);
  assert.ok(worst <= 2 ** 8 * 1e-4 * scale, `max |coop - fma| = ${worst} of logits up to ${scale}`);
});
