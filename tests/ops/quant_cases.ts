// Op cases of GGUF block weights (issue 16), added to the one harness by cases.ts: for every block type the
// embedding gather (bit-exact: dequantization is exact, tier-2 bound 0 for a movement of exact values), over
// random blocks and crafted blocks with extreme scales (f16 max, the smallest subnormal, negative zero, NaN-free
// random bytes) and all-zero blocks; the matmul (prefill batches, the batch-1 gemv unit and the batched
// kernel's chunking past 8 rows) and a fused decode block with each type, within the tier-2 tolerance; for the
// types with an integer path (graph/ops/qdot.ts XQ_RUNS: all of them) the same with quantized x, and NaN/Inf in x.
import type { BlockDType, DType } from "../../graph/dtype.ts";
import { BLOCK } from "../../graph/dtype.ts";
import type { CaseBuilder, OpCase } from "./cases.ts";
import { rng } from "./cases.ts";
import type { Tensor } from "../../graph/tracer.ts";
import { hasXq } from "../../graph/ops/qdot.ts";

export const QTYPES: BlockDType[] = ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"];

type Add = (name: string, f: (b: CaseBuilder) => OpCase) => void;
type DecodeBlock = (name: string, o: { w: DType; D: number; H: number; KVH: number; hd: number; C: number; kv: "f16" | "f32"; style: "half" | "adjacent"; bias: boolean; ffn: number }) => void;

/** Byte offsets of the f16 scale fields of a block (d, and dmin/m where the type has one). */
const SCALES: Record<BlockDType, number[]> = {
  q8_0: [0], q4_0: [0], q4_1: [0, 2], q5_0: [0], q5_1: [0, 2], q4_k: [0, 2], q5_k: [0, 2], q6_k: [208],
};

/**
 * `rows` rows of `width` as raw blocks: random quant bytes, and per block a scale pattern: 0 random finite
 * scales, 1 f16 max (65504), 2 the smallest f16 subnormal, 3 negative zero, 4 an all-zero block, 5 -65504.
 */
export function craftedBlocks(t: BlockDType, rows: number, width: number, seed: number): Uint8Array {
  const r = rng(seed), bl = BLOCK[t], nb = (rows * width) / bl.elems;
  const out = new Uint8Array(nb * bl.bytes);
  for (let i = 0; i < out.length; i++) out[i] = Math.floor(r(0, 256));
  for (let k = 0; k < nb; k++) {
    const o = k * bl.bytes, kind = k % 6;
    if (kind === 4) {
      out.fill(0, o, o + bl.bytes);
      continue;
    }
    for (const s of SCALES[t]) {
      // random finite scales: a positive or negative f16 with exponent below 30 (no Inf/NaN)
      const h = kind === 1 ? 0x7bff : kind === 2 ? 0x0001 : kind === 3 ? 0x8000 : kind === 5 ? 0xfbff
        : (Math.floor(r(0, 2)) << 15) | (Math.floor(r(1, 30)) << 10) | Math.floor(r(0, 1024));
      out[o + s] = h & 0xff;
      out[o + s + 1] = h >> 8;
    }
  }
  return out;
}

export function quantCases(add: Add, decodeBlock: DecodeBlock): void {
  for (const t of QTYPES) {
    const k = BLOCK[t].elems === 256;
    const W = k ? 512 : 96;
    add(`gather ${t} random`, (b) => {
      const ids = b.input("i32", [5], 0, 30);
      return b.done({ y: b.t.gather(b.weight(t, [30, W]), ids) });
    });
    add(`gather ${t} extreme scales and zero blocks (bit-exact)`, (b) => {
      const rows = 12;
      b.slots.ids = Int32Array.from({ length: rows }, (_, i) => rows - 1 - i);
      const ids = b.t.slot("ids", { kind: "Input", dtype: "i32", shape: [rows] });
      return b.done({ y: b.t.gather(b.weightBytes(t, [rows, W], craftedBlocks(t, rows, W, 77 + W)), ids) });
    });
    // 260 rows: the tiled matmul on GPU targets (kernels/lib/tiled_matmul.ts, from TILED_MIN_ROWS rows). mmaSplit
    // asks for f32-level operands, which keeps it there where cooperative matrices would take the rows (Vulkan:
    // x and the weights rounded once to bf16, checked against float64 in tests/kernels/coop_matmul.test.ts)
    for (const [batch, n, kk] of k ? [[1, 33, 256], [3, 17, 512], [11, 9, 256], [260, 17, 256]] : [[1, 40, 64], [5, 17, 96], [11, 9, 64], [260, 17, 96]]) {
      add(`matmul ${t} ${batch}x${n}x${kk}`, (b) => b.done({ y: b.t.matmul(b.input("f32", [batch, kk]), b.weight(t, [n, kk])) }, { compile: { mmaSplit: true } }));
    }
    if (hasXq(t)) {
      // The integer path (graph/ops/qdot.ts): random x, x with an all-zero run and one huge value, extreme
      // weight scales and zero blocks, and a fused block (rmsnorm folded: the kernel quantizes x·g).
      const [n, kk] = k ? [37, 512] : [40, 96];
      add(`matmul ${t} 1x${n}x${kk} quantized x`, (b) => b.done({ y: b.t.matmul(b.input("f32", [1, kk]), b.weight(t, [n, kk]), { xq: true }) }));
      // long enough for a 32-lane team to take 2 chunks per lane (tests/ops/qgemv_tune.test.ts)
      add(`matmul ${t} 1x21x2048 quantized x`, (b) => b.done({ y: b.t.matmul(b.input("f32", [1, 2048]), b.weight(t, [21, 2048]), { xq: true }) }));
      add(`matmul ${t} quantized x: zero run, outlier, extreme scales and zero blocks`, (b) => {
        const x = b.input("f32", [1, kk]), xs = b.slots.in0 as Float32Array;
        xs.fill(0, 16, 32);
        xs[40] = 3e4;
        xs[41] = -1e-3;
        return b.done({ y: b.t.matmul(x, b.weightBytes(t, [n, kk], craftedBlocks(t, n, kk, 5 + kk)), { xq: true }) });
      });
      // q8_0's 34-byte blocks at every alignment of their quants modulo 16 bytes (24 blocks a row), with crafted
      // scales: the int path reads them as u32 words shifted into place (dequant.ts words32)
      if (t === "q8_0") {
        add(`matmul ${t} quantized x: crafted blocks in 16-byte rows`, (b) => {
          const x = b.input("f32", [1, 768]);
          (b.slots.in0 as Float32Array)[100] = -2e3;
          return b.done({ y: b.t.matmul(x, b.weightBytes(t, [13, 768], craftedBlocks(t, 13, 768, 31)), { xq: true }) });
        });
      }
      // A NaN or an infinity in x: its run's dx is NaN (graph/ops/qdot.ts), so every row is NaN on every device
      // (not ±Inf or a finite value from whatever bits the device's NaN gives the q).
      add(`matmul ${t} quantized x: NaN, +Inf, -Inf in x`, (b) => {
        const xa = b.input("f32", [1, kk]), xb = b.input("f32", [1, kk]), w = b.weight(t, [n, kk]);
        (b.slots.in0 as Float32Array)[5] = NaN;
        const xbs = b.slots.in1 as Float32Array;
        xbs[7] = Infinity;
        xbs[kk - 1] = -Infinity;
        return b.done({ nan: b.t.matmul(xa, w, { xq: true }), inf: b.t.matmul(xb, w, { xq: true }) });
      });
      // Fused units one matmul deep (a q flip is a step: through attention and a second layer of matmuls the
      // expected-mode bound says little): rmsnorm folded into q/k/v with rope and the f16 cache write, and
      // rmsnorm folded into gate/up with silu_mul; then down with the residual, over an exact input.
      const D = k ? 256 : 64, hd = k ? 64 : 16, C = 4, ffn = k ? 512 : 96;
      add(`gemv units quantized x ${t}: rmsnorm + q/k/v, rope, f16 cache write`, (b) => {
        const x = b.input("f32", [1, D]), pos = b.t.slot("pos", { kind: "Pos", dtype: "i32", shape: [1] });
        b.slots.pos = new Int32Array([2]);
        const h = b.t.rmsnorm(x, b.weight("f32", [D], 1), 1e-5);
        const proj = (n: number) => b.t.reshape(b.t.matmul(h, b.weight(t, [n, D]), { xq: true }), [1, n / hd, hd]);
        const rope = (v: Tensor) => b.t.rope(v, pos, { theta: 10000, style: "half" });
        const q = rope(proj(2 * hd)), kk2 = b.t.cast(rope(proj(hd)), "f16"), v = b.t.cast(proj(hd), "f16");
        const nm = `xq:${t}`;
        b.t.writeState(`${nm}:k`, b.t.updateSlice(b.t.state(`${nm}:k`, "f16", [C, 1, hd]), kk2, pos, 0));
        b.t.writeState(`${nm}:v`, b.t.updateSlice(b.t.state(`${nm}:v`, "f16", [C, 1, hd]), v, pos, 0));
        return b.done({ q: b.t.reshape(q, [2 * hd]) });
      });
      add(`gemv units quantized x ${t}: rmsnorm + gate/up silu_mul, down + residual`, (b) => {
        const x = b.input("f32", [1, D]);
        const h = b.t.rmsnorm(x, b.weight("f32", [D], 1), 1e-5);
        const ff = b.t.siluMul(b.t.matmul(h, b.weight(t, [ffn, D]), { xq: true }), b.t.matmul(h, b.weight(t, [ffn, D]), { xq: true }));
        const z = b.input("f32", [1, ffn]);
        return b.done({ ff, y: b.t.add(x, b.t.matmul(z, b.weight(t, [D, ffn]), { xq: true })) });
      });
    }
    decodeBlock(`gemv units: llama-like block ${t}`, k
      ? { w: t, D: 256, H: 4, KVH: 2, hd: 64, C: 6, kv: "f16", style: "half", bias: false, ffn: 512 }
      : { w: t, D: 64, H: 4, KVH: 2, hd: 16, C: 6, kv: "f16", style: "half", bias: true, ffn: 96 });
  }
}
