// Our quantizer (llm/formats/ggml-quants.ts) and oracle dequantization (graph/dtype.ts) against ggml itself:
// libggml-base.so from node-llama-cpp's prebuilt binaries (llama.cpp's own quantize_row_*_ref and
// dequantize_row_*), called through ffi/. Bytes and values must be identical, for random rows of several
// scales, rows with outliers, all-zero rows, constant rows and rows of f16 extremes.
import { test } from "node:test";
import process from "node:process";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { defineSymbols, dlopen } from "../../ffi/lib.ts";
import { BLOCK, type BlockDType, dequantize } from "../../graph/dtype.ts";
import { quantizeBlocks } from "../../llm/formats/ggml-quants.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const LIB = `${root}node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so`;
const TYPES: [BlockDType, string][] = [
  ["q8_0", "q8_0"], ["q4_0", "q4_0"], ["q4_1", "q4_1"], ["q5_0", "q5_0"], ["q5_1", "q5_1"],
  ["q4_k", "q4_K"], ["q5_k", "q5_K"], ["q6_k", "q6_K"],
];
const symbols = defineSymbols(Object.fromEntries(TYPES.flatMap(([, c]) => [
  [`q_${c}`, { name: `quantize_row_${c}_ref`, args: ["buffer", "buffer", "i64"], result: "void" }],
  [`d_${c}`, { name: `dequantize_row_${c}`, args: ["buffer", "buffer", "i64"], result: "void" }],
])) as Record<string, { name: string; args: ["buffer", "buffer", "i64"]; result: "void" }>);

const skip = process.platform !== "linux" || process.arch !== "x64" ? "ggml prebuilt for linux-x64 only"
  : !existsSync(LIB) ? "node-llama-cpp's libggml-base.so is not installed (npm ci)" : false;

// ggml's static initializer asserts that its terminate handler is not installed yet: a second load of the same
// library in one process (after a dlclose) aborts the whole process. So it is loaded once and never closed; a
// later dlopen of the same path (tests/quant/llamacpp_quantize.ts, imported below) only counts a reference.
let loaded: ReturnType<typeof dlopen<typeof symbols>> | undefined;
function ggml() {
  return loaded ??= dlopen(LIB, symbols);
}

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return s / 2 ** 32;
  };
}

/** Rows that reach the quantizers' edge cases: each 1024 values (4 K-blocks, 32 small blocks). */
function inputs(): { name: string; x: Float32Array }[] {
  const r = rng(12345), n = 1024;
  const gauss = () => Math.sqrt(-2 * Math.log(1 - r())) * Math.cos(2 * Math.PI * r());
  const out: { name: string; x: Float32Array }[] = [];
  for (const s of [1e-3, 0.05, 1, 300]) out.push({ name: `gaussian*${s}`, x: Float32Array.from({ length: n }, () => gauss() * s) });
  out.push({ name: "uniform positive", x: Float32Array.from({ length: n }, () => r() * 2) });
  out.push({ name: "uniform negative", x: Float32Array.from({ length: n }, () => -r() * 2) });
  out.push({ name: "outliers", x: Float32Array.from({ length: n }, (_, i) => (i % 97 === 0 ? 40 : 1) * gauss() * 0.02) });
  out.push({ name: "all zero", x: new Float32Array(n) });
  out.push({ name: "negative zero", x: new Float32Array(n).fill(-0) });
  out.push({ name: "constant", x: new Float32Array(n).fill(0.75) });
  out.push({ name: "sparse", x: Float32Array.from({ length: n }, (_, i) => (i % 37 === 5 ? gauss() : 0)) });
  out.push({ name: "f16 extremes", x: Float32Array.from({ length: n }, (_, i) => [65504, -65504, 6e-8, -6e-8, 1e-30, 0][i % 6] * (1 + (i % 3) / 7)) });
  out.push({ name: "tiny", x: Float32Array.from({ length: n }, () => gauss() * 1e-9) });
  return out;
}

test("quantize_row_*_ref and dequantize_row_* of ggml equal ours bit for bit", { skip }, () => {
  const lib = ggml();
  {
    for (const [d, c] of TYPES) {
      for (const { name, x } of inputs()) {
        const n = x.length, bytes = (n / BLOCK[d].elems) * BLOCK[d].bytes;
        const theirs = new Uint8Array(bytes);
        lib.symbols[`q_${c}`](x, theirs, BigInt(n));
        const ours = quantizeBlocks(d, x);
        const at = ours.findIndex((v, i) => v !== theirs[i]);
        assert.equal(at, -1, `${d} ${name}: first differing byte ${at} (block ${Math.floor(at / BLOCK[d].bytes)}, offset ${at % BLOCK[d].bytes}): ours ${ours[at]}, ggml ${theirs[at]}`);
        const want = new Float32Array(n);
        lib.symbols[`d_${c}`](theirs, want, BigInt(n));
        const got = dequantize(d, theirs, n);
        const wb = new Uint32Array(want.buffer), gb = new Uint32Array(got.buffer);
        const k = gb.findIndex((v, i) => v !== wb[i]);
        assert.equal(k, -1, `${d} ${name}: dequantized element ${k}: ours ${got[k]}, ggml ${want[k]}`);
      }
    }
  }
});

test("random block bytes (any scales, NaN included) dequantize as ggml does", { skip }, () => {
  const lib = ggml();
  {
    const r = rng(99);
    for (const [d, c] of TYPES) {
      const n = 2048, bytes = Uint8Array.from({ length: (n / BLOCK[d].elems) * BLOCK[d].bytes }, () => Math.floor(r() * 256));
      const want = new Float32Array(n);
      lib.symbols[`d_${c}`](bytes, want, BigInt(n));
      const got = dequantize(d, bytes, n);
      for (let i = 0; i < n; i++) {
        if (Number.isNaN(want[i])) assert.ok(Number.isNaN(got[i]), `${d} [${i}]: ggml NaN, ours ${got[i]}`);
        else assert.ok(Object.is(got[i], want[i]), `${d} [${i}]: ours ${got[i]}, ggml ${want[i]}`);
      }
    }
  }
});

// llama.cpp's own quantizer through libllama (it loads this same ggml): registered from this module, so that both
// run while this file's handle keeps ggml loaded. A test file of its own would load ggml again after this one's
// handle is dropped, and ggml's initializer aborts the process on such a reload.
import "./llamacpp_quantize.ts";
