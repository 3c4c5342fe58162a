// GGUF reader: the shipped stories260K.gguf, synthetic files from the writer (every metadata type, F16/BF16/
// Q8_0/Q4_0 tensors, v2, custom alignment), and bad input that must raise a typed error naming what is wrong.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  LlmError,
  MetadataError,
  ModelFormatError,
  ModelNotFoundError,
  NestingLimitError,
  UnsupportedFormatError,
  UnsupportedTensorTypeError,
} from "../../llm/errors.ts";
import { type GGUFArray, type GGUFValue, openGGUF, parseGGUF } from "../../llm/formats/gguf.ts";
import { meta, writeGGUF } from "../../llm/formats/gguf-write.ts";
import { dequantize, f16BitsToF32, f32ToBf16Bits, f32ToF16Bits, quantize } from "../../llm/formats/quant.ts";
import { rng as seeded } from "../rng.ts";

const STORIES = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));
const storiesBytes = new Uint8Array(readFileSync(STORIES));

/** Runs fn and returns the error it throws (failing if it does not throw). */
function thrown(fn: () => unknown): Error {
  try {
    fn();
  } catch (e) {
    return e as Error;
  }
  assert.fail("expected an error");
}

test("stories260K.gguf: header, metadata values, 48 F32 tensors with row-major shapes", () => {
  const g = openGGUF(STORIES);
  assert.equal(g.version, 3);
  assert.equal(g.alignment, 32);
  assert.equal(g.tensorCount, 48);
  assert.equal(g.architecture, "llama");
  assert.equal(g.getString("general.architecture"), "llama");
  assert.equal(g.getU32("llama.embedding_length"), 64);
  assert.equal(g.getU32("llama.feed_forward_length"), 172);
  assert.equal(g.getU32("llama.block_count"), 5);
  assert.equal(g.getU32("llama.attention.head_count"), 8);
  assert.equal(g.getU32("llama.attention.head_count_kv"), 4);
  assert.equal(g.getU32("llama.rope.dimension_count"), 8);
  assert.equal(g.getU32("llama.context_length"), 2048);
  assert.equal(g.getF32("llama.attention.layer_norm_rms_epsilon"), Math.fround(1e-5));
  assert.equal(g.get("llama.attention.layer_norm_rms_epsilon")?.type, "f32");
  assert.equal(g.getString("tokenizer.ggml.model"), "llama");
  assert.equal(g.getStrings("tokenizer.ggml.tokens").length, 512);
  assert.equal(g.getF32s("tokenizer.ggml.scores").length, 512);
  assert.deepEqual(Array.from(g.getI32s("tokenizer.ggml.token_type").subarray(0, 4)), [2, 3, 3, 6]);
  assert.equal(g.getU32("tokenizer.ggml.bos_token_id"), 1);
  assert.equal(g.getU32("tokenizer.ggml.eos_token_id"), 2);
  assert.equal(g.getU32("tokenizer.ggml.unknown_token_id"), 0);

  const tensors = [...g.tensors()];
  assert.equal(tensors.length, 48);
  for (const t of tensors) {
    assert.equal(t.dtype, "f32", t.name);
    assert.equal(t.ggmlType, 0);
    assert.equal(t.offset % 32, 0);
    assert.deepEqual(t.dims, t.shape.slice().reverse());
  }
  const shape = (n: string) => g.info(n)?.shape;
  assert.deepEqual(shape("token_embd.weight"), [512, 64]);
  assert.deepEqual(shape("output.weight"), [512, 64]);
  assert.deepEqual(shape("output_norm.weight"), [64]);
  for (let l = 0; l < 5; l++) {
    assert.deepEqual(shape(`blk.${l}.attn_q.weight`), [64, 64]);
    assert.deepEqual(shape(`blk.${l}.attn_k.weight`), [32, 64]);
    assert.deepEqual(shape(`blk.${l}.attn_v.weight`), [32, 64]);
    assert.deepEqual(shape(`blk.${l}.attn_output.weight`), [64, 64]);
    assert.deepEqual(shape(`blk.${l}.ffn_gate.weight`), [172, 64]);
    assert.deepEqual(shape(`blk.${l}.ffn_up.weight`), [172, 64]);
    assert.deepEqual(shape(`blk.${l}.ffn_down.weight`), [64, 172]);
    assert.deepEqual(shape(`blk.${l}.attn_norm.weight`), [64]);
    assert.deepEqual(shape(`blk.${l}.ffn_norm.weight`), [64]);
  }
  // Read from the file when asked: a fresh buffer of exactly the tensor, aligned so that a Float32Array view works.
  const emb = g.bytes("token_embd.weight");
  assert.equal(emb.byteOffset, 0);
  assert.equal(emb.buffer.byteLength, 512 * 64 * 4);
  assert.deepEqual(emb, storiesBytes.subarray(g.info("token_embd.weight")!.offset, g.info("token_embd.weight")!.offset + 512 * 64 * 4));
  assert.equal(emb.byteLength, 512 * 64 * 4);
  assert.equal(emb.byteOffset % 4, 0);
  // output.weight equals token_embd.weight (tied embedding, per SOURCE.md).
  assert.deepEqual(g.bytes("output.weight"), emb);
  const f = new Float32Array(emb.buffer, emb.byteOffset, 512 * 64);
  assert.ok(f.every(Number.isFinite));
  assert.equal(g.info("nope"), undefined);
  assert.throws(() => g.bytes("nope"), (e: Error) => e instanceof LlmError && /nope/.test(e.message));
});

test("typed accessors: optional variants, conversions and type errors name the key", () => {
  const g = parseGGUF(storiesBytes, "stories");
  assert.equal(g.optU32("missing.key"), undefined);
  assert.equal(g.optString("missing.key"), undefined);
  let e = thrown(() => g.getU32("missing.key"));
  assert.ok(e instanceof MetadataError);
  assert.match(e.message, /'missing\.key'.*missing/);
  e = thrown(() => g.getU32("general.architecture"));
  assert.ok(e instanceof MetadataError);
  assert.match(e.message, /'general\.architecture'.*expected a u32, found string/);
  e = thrown(() => g.getString("llama.block_count"));
  assert.match(e.message, /'llama\.block_count'.*expected a string, found u32/);
  e = thrown(() => g.getStrings("tokenizer.ggml.scores"));
  assert.match(e.message, /'tokenizer\.ggml\.scores'.*array of f32/);
  // 0xFFFFFFFF is a u32 but not an i32.
  assert.equal(g.getU32("tokenizer.ggml.padding_token_id"), 0xffffffff);
  assert.throws(() => g.getI32("tokenizer.ggml.padding_token_id"), /does not fit an i32/);
  assert.equal(g.getU64("llama.block_count"), 5);
  assert.deepEqual(Array.from(g.getF32s("tokenizer.ggml.token_type").subarray(0, 3)), [2, 3, 3]);
});

// ---- synthetic files ----

/** Uniform in [-0.5, 0.5), from the tests' one seeded generator. */
function rng(seed: number): () => number {
  const r = seeded(seed);
  return () => r() - 0.5;
}

const ALL_TYPES: [string, GGUFValue][] = [
  ["t.u8", meta.u8(200)],
  ["t.i8", meta.i8(-100)],
  ["t.u16", meta.u16(60000)],
  ["t.i16", meta.i16(-30000)],
  ["t.u32", meta.u32(4000000000)],
  ["t.i32", meta.i32(-2000000000)],
  ["t.f32", meta.f32(1.5)],
  ["t.bool", meta.bool(true)],
  ["t.string", meta.string("héllo ▁ 🦙")],
  ["t.u64", meta.u64(2n ** 63n + 5n)],
  ["t.i64", meta.i64(-(2n ** 62n))],
  ["t.f64", meta.f64(Math.PI)],
  ["t.strings", meta.strings(["a", "", "ü"])],
  ["t.f32s", meta.f32s([1, -2.5, 3])],
  ["t.i32s", meta.i32s([7, -8])],
  ["t.bools", meta.array({ type: "bool", value: [true, false, true] })],
  ["t.u64s", meta.array({ type: "u64", value: BigUint64Array.of(1n, 2n ** 64n - 1n) })],
  ["t.i16s", meta.array({ type: "i16", value: Int16Array.of(-1, 2) })],
  ["t.f64s", meta.array({ type: "f64", value: Float64Array.of(0.1, -0.2) })],
  ["t.nested", meta.array({
    type: "array",
    value: [{ type: "string", value: ["x", "yz"] }, { type: "u8", value: Uint8Array.of(1, 2, 3) }],
  })],
  ["t.empty", meta.array({ type: "u32", value: new Uint32Array(0) })],
];

function syntheticTensors() {
  const r = rng(7);
  const vals = (n: number) => Float32Array.from({ length: n }, () => r() * 4);
  const mk = (name: string, dtype: "f32" | "f16" | "bf16" | "q8_0" | "q4_0", shape: number[]) => {
    const x = vals(shape.reduce((a, b) => a * b, 1));
    return { name, dtype, shape, x, data: quantize(dtype, x) };
  };
  return [
    mk("w.f32", "f32", [3, 5]),
    mk("w.f16", "f16", [4, 8]),
    mk("w.bf16", "bf16", [2, 16]),
    mk("w.q8_0", "q8_0", [2, 64]),
    mk("w.q4_0", "q4_0", [3, 32]),
    mk("w.vec", "f32", [7]),
  ];
}

for (const [version, alignment] of [[3, 32], [2, 64]] as const) {
  test(`writer round trip: GGUF v${version}, alignment ${alignment}, every metadata type, F32/F16/BF16/Q8_0/Q4_0`, () => {
    const ts = syntheticTensors();
    const file = writeGGUF({ version, alignment, metadata: [["general.architecture", meta.string("test")], ...ALL_TYPES], tensors: ts });
    const g = parseGGUF(file, "synthetic");
    assert.equal(g.version, version);
    assert.equal(g.alignment, alignment);
    for (const [k, v] of ALL_TYPES) assert.deepEqual(g.get(k), v, k);
    assert.equal(g.getU32("t.u8"), 200);
    assert.equal(g.getI32("t.i16"), -30000);
    assert.throws(() => g.getU32("t.i8"), /does not fit a u32/);
    assert.throws(() => g.getU64("t.u64"), /does not fit a non-negative safe integer/);
    assert.equal(g.getF32("t.f64"), Math.PI);
    assert.equal(g.getBool("t.bool"), true);
    assert.deepEqual(g.getStrings("t.strings"), ["a", "", "ü"]);
    assert.deepEqual(Array.from(g.getI32s("t.i16s")), [-1, 2]);
    assert.equal(g.tensorCount, ts.length);
    for (const t of ts) {
      const info = g.info(t.name)!;
      assert.equal(info.dtype, t.dtype);
      assert.deepEqual(info.shape, t.shape);
      assert.deepEqual(info.dims, t.shape.slice().reverse());
      assert.equal(info.offset % alignment, 0);
      const b = g.bytes(t.name);
      assert.deepEqual(b, t.data);
      assert.equal(b.buffer, file.buffer, "a view, not a copy");
      const back = dequantize(t.dtype, b, t.x.length);
      const tol = { f32: 0, f16: 2e-3, bf16: 1.6e-2, q8_0: 2.2e-2, q4_0: 0.3 }[t.dtype];
      for (let i = 0; i < t.x.length; i++) assert.ok(Math.abs(back[i] - t.x[i]) <= tol, `${t.name}[${i}]: ${back[i]} vs ${t.x[i]}`);
    }
  });
}

test("quant helpers: f16/bf16 rounding, q8_0 and q4_0 blocks as ggml lays them out", () => {
  assert.equal(f32ToF16Bits(1), 0x3c00);
  assert.equal(f32ToF16Bits(-2), 0xc000);
  assert.equal(f32ToF16Bits(65504), 0x7bff);
  assert.equal(f32ToF16Bits(65520), 0x7c00); // rounds to inf
  assert.equal(f32ToF16Bits(2 ** -24), 0x0001); // smallest subnormal
  assert.equal(f32ToF16Bits(1 + 2 ** -11), 0x3c00); // tie to even
  assert.equal(f32ToF16Bits(1 + 3 * 2 ** -11), 0x3c02);
  assert.ok(Number.isNaN(f16BitsToF32(f32ToF16Bits(NaN))));
  assert.equal(f16BitsToF32(0x0001), 2 ** -24);
  assert.equal(f32ToBf16Bits(1), 0x3f80);
  assert.equal(f32ToBf16Bits(1 + 2 ** -8), 0x3f80); // tie to even
  assert.equal(f32ToBf16Bits(1 + 3 * 2 ** -8), 0x3f82);
  // q8_0: d = max|x| / 127 as f16, then 32 int8.
  const x = Float32Array.from({ length: 32 }, (_, i) => i - 16);
  const q8 = quantize("q8_0", x);
  assert.equal(q8.length, 34);
  assert.equal(f16BitsToF32(q8[0] | (q8[1] << 8)), f16BitsToF32(f32ToF16Bits(16 / 127)));
  assert.equal(new Int8Array(q8.buffer)[2], -127);
  // q4_0: d = (value of max |x|) / -8; nibbles j | (j+16) << 4, offset by 8.
  const q4 = quantize("q4_0", x);
  assert.equal(q4.length, 18);
  assert.equal(f16BitsToF32(q4[0] | (q4[1] << 8)), 2);
  assert.equal(q4[2] & 15, 0); // x[0] = -16 → -8 + 8
  assert.equal(q4[2] >> 4, 8); // x[16] = 0
  assert.deepEqual(Array.from(dequantize("q4_0", q4, 32)).slice(0, 2), [-16, -14]);
  assert.throws(() => quantize("q8_0", new Float32Array(31)), RangeError);
});

test("byte sizes of Q4_K, Q6_K and integer tensors; shape is GGUF dims reversed", () => {
  const file = writeGGUF({
    tensors: [
      { name: "k4", dtype: "q4_k", shape: [3, 512], data: new Uint8Array(3 * 2 * 144) },
      { name: "k6", dtype: "q6_k", shape: [2, 256], data: new Uint8Array(2 * 210) },
      { name: "i8", dtype: "i8", shape: [5], data: new Uint8Array(5) },
      { name: "i32", dtype: "i32", shape: [2, 3, 4], data: new Uint8Array(96) },
    ],
  });
  const g = parseGGUF(file);
  assert.deepEqual([...g.tensors()].map((t) => [t.name, t.dtype, t.ggmlType, t.byteLength, t.dims]), [
    ["k4", "q4_k", 12, 864, [512, 3]],
    ["k6", "q6_k", 14, 420, [256, 2]],
    ["i8", "i8", 24, 5, [5]],
    ["i32", "i32", 26, 96, [4, 3, 2]],
  ]);
  assert.equal(g.bytes("k6").length, 420);
});

test("a vocab-only file (0 tensors, data section past the end) loads", () => {
  const g = parseGGUF(writeGGUF({ metadata: { "general.architecture": meta.string("llama") } }));
  assert.equal(g.tensorCount, 0);
  assert.equal(g.architecture, "llama");
});

// ---- bad input ----

function expectFormat(bytes: Uint8Array, field: RegExp, problem?: RegExp): ModelFormatError {
  const e = thrown(() => parseGGUF(bytes, "bad.gguf"));
  assert.ok(e instanceof ModelFormatError, `expected ModelFormatError, got ${e?.constructor?.name}: ${e?.message}`);
  assert.match(e.message, /^bad\.gguf: /);
  assert.match(e.field, field);
  if (problem) assert.match(e.message, problem);
  assert.ok(e.offset >= 0 && e.offset <= bytes.length, `offset ${e.offset}`);
  assert.ok(!e.message.includes("\n"), "one line");
  return e;
}

test("a missing file gives ModelNotFoundError naming the path", () => {
  const e = thrown(() => openGGUF("/nonexistent/dir/model.gguf"));
  assert.ok(e instanceof ModelNotFoundError);
  assert.equal(e.path, "/nonexistent/dir/model.gguf");
  assert.match(e.message, /\/nonexistent\/dir\/model\.gguf: cannot read model file: no such file/);
  const d = thrown(() => openGGUF(fileURLToPath(new URL(".", import.meta.url))));
  assert.ok(d instanceof ModelNotFoundError);
  assert.match(d.message, /is a directory/);
});

test("a non-GGUF file gives ModelFormatError at header.magic", () => {
  const e = thrown(() => openGGUF(fileURLToPath(import.meta.url)));
  assert.ok(e instanceof ModelFormatError);
  assert.equal(e.field, "header.magic");
  assert.match(e.message, /not a GGUF file/);
  expectFormat(new Uint8Array(0), /header\.magic/, /only 0 bytes/);
  expectFormat(new TextEncoder().encode("GGU"), /header\.magic/);
});

test("a truncated GGUF gives ModelFormatError naming the field, at every kind of cut", () => {
  const b = storiesBytes;
  const g = parseGGUF(b);
  // Where regions start: metadata at 24, tensor infos at the first tensor name's length field.
  const name = new TextEncoder().encode("token_embd.weight");
  let infos = -1;
  for (let i = 24; i < g.dataOffset && infos < 0; i++) {
    if (b[i] === name[0] && name.every((c, j) => b[i + j] === c) && b[i - 8] === name.length) infos = i - 8;
  }
  assert.ok(infos > 24);
  const tokens = b.indexOf(0x3c, 40); // "<" of "<unk>", inside the tokens array
  const cuts: [number, RegExp][] = [
    [2, /header\.magic/],
    [6, /header\.version/],
    [12, /header\.tensor_count/],
    [20, /header\.metadata_kv_count/],
    [24, /header\.metadata_kv_count|metadata\[0\] key/], // the count check may fire first
    [30, /header\.metadata_kv_count|metadata\[0\] key/],
    [tokens + 2, /header\.metadata_kv_count|metadata\[0\] 'tokenizer\.ggml\.tokens'/],
    [5000, /metadata\[\d+\]/],
    [infos - 3, /metadata\[\d+\]/],
    [infos, /header\.tensor_count/],
    [infos + 30, /header\.tensor_count|tensor_info\[0\]|tensor 'token_embd\.weight'/],
    [g.dataOffset - 4, /header\.tensor_count|tensor '/],
    [g.dataOffset + 10, /tensor '[^']+' data/],
    [b.length - 1, /tensor '[^']+' data/],
  ];
  for (const [cut, field] of cuts) {
    const e = expectFormat(b.slice(0, cut), field);
    assert.match(e.message, /truncated|cannot fit|runs past|only \d+ bytes/, `cut at ${cut}: ${e.message}`);
  }
  // Every cut point in the header and the first metadata entries, and a sweep through the file.
  for (let cut = 0; cut < 200; cut++) expectFormat(b.slice(0, cut), /./);
  for (let cut = 200; cut < b.length; cut += 997) expectFormat(b.slice(0, cut), /./);
});

test("a truncated synthetic file names the exact field", () => {
  const file = writeGGUF({
    metadata: [["general.architecture", meta.string("llama")], ["a.count", meta.u32(3)]],
    tensors: [{ name: "w", dtype: "f32", shape: [2, 8], data: new Uint8Array(64) }],
  });
  // header 24 | key "general.architecture" 8+20 | type 4 | value 8+5 | key "a.count" 8+7 | type 4 | u32 4 | tensor info
  const aCountValue = 24 + 28 + 4 + 13 + 15 + 4;
  const e = expectFormat(file.slice(0, aCountValue + 2), /metadata\[1\] 'a\.count'/, /truncated: needs 4 bytes, 2 left/);
  assert.equal(e.offset, aCountValue);
  // Cut inside the tensor's dims, with enough bytes left for the count check.
  const infoStart = aCountValue + 4;
  const padded = new Uint8Array(infoStart + 8 + 1 + 4 + 8 + 3);
  padded.set(file.subarray(0, padded.length));
  expectFormat(padded, /tensor 'w' dims\[1\]|header\.tensor_count/);
  expectFormat(file.slice(0, file.length - 1), /tensor 'w' data/, /runs past the end/);
});

test("a corrupt string length gives ModelFormatError naming the string", () => {
  const b = storiesBytes.slice();
  const dv = new DataView(b.buffer);
  dv.setBigUint64(24, 0xffffffffffn, true); // first key's length
  expectFormat(b, /metadata\[0\] key length/, /string length 1099511627775 runs past the end/);
  dv.setBigUint64(24, 2n ** 62n, true);
  expectFormat(b, /metadata\[0\] key length/, /too large/);
  // A token string inside the tokens array.
  const c = storiesBytes.slice();
  const at = c.indexOf(0x3c, 40) - 8; // length field of "<unk>"
  new DataView(c.buffer).setBigUint64(at, 1n << 40n, true);
  expectFormat(c, /metadata\[0\] 'tokenizer\.ggml\.tokens'\[0\] length/);
});

test("an unknown or unsupported tensor type gives UnsupportedTensorTypeError naming the tensor and type id", () => {
  const mk = (ggmlType: number) =>
    writeGGUF({ tensors: [{ name: "blk.0.ffn_up.weight", dtype: "f32", shape: [4, 32], data: new Uint8Array(512), ggmlType }] });
  let e = thrown(() => parseGGUF(mk(99), "bad.gguf"));
  assert.ok(e instanceof UnsupportedTensorTypeError);
  assert.ok(e instanceof ModelFormatError);
  assert.equal(e.tensor, "blk.0.ffn_up.weight");
  assert.equal(e.typeId, 99);
  assert.match(e.message, /tensor 'blk\.0\.ffn_up\.weight' has unknown ggml type id 99/);
  e = thrown(() => parseGGUF(mk(11), "bad.gguf"));
  assert.ok(e instanceof UnsupportedTensorTypeError);
  assert.match(e.message, /'blk\.0\.ffn_up\.weight' has ggml type Q3_K \(id 11\), which is not supported/);
});

test("other corruption: version, big-endian, counts, dims, alignment, offsets, duplicates, value types", () => {
  const good = writeGGUF({
    metadata: { "general.architecture": meta.string("x") },
    tensors: [{ name: "w", dtype: "q8_0", shape: [1, 32], data: new Uint8Array(34) }],
  });
  const patch = (f: (dv: DataView, b: Uint8Array) => void) => {
    const b = good.slice();
    f(new DataView(b.buffer), b);
    return b;
  };
  let e: Error = expectFormat(patch((dv) => dv.setUint32(4, 1, true)), /header\.version/, /version 1 is not supported/);
  assert.ok(e instanceof UnsupportedFormatError);
  e = expectFormat(patch((dv) => dv.setUint32(4, 3, false)), /header\.version/, /big-endian/);
  assert.ok(e instanceof UnsupportedFormatError);
  expectFormat(patch((dv) => dv.setUint32(4, 9, true)), /header\.version/, /version 9/);
  expectFormat(patch((dv) => dv.setBigUint64(8, 1n << 40n, true)), /header\.tensor_count/, /cannot fit/);
  expectFormat(patch((dv) => dv.setBigUint64(16, 1n << 40n, true)), /header\.metadata_kv_count/, /cannot fit/);
  // Metadata value type id: header 24 + key (8 + 20).
  expectFormat(patch((dv) => dv.setUint32(52, 77, true)), /metadata\[0\] 'general\.architecture' type/, /unknown metadata value type id 77/);
  // Tensor info: after value (8 + 1): name 8+1, n_dims, dims, type, offset.
  const info = 52 + 4 + 9;
  expectFormat(patch((dv) => dv.setUint32(info + 9, 5, true)), /tensor 'w' n_dims/, /5 dims, at most 4/);
  expectFormat(patch((dv) => dv.setBigUint64(info + 13, 33n, true)), /tensor 'w' dims\[0\]/, /not a multiple of the q8_0 block size 32/);
  expectFormat(patch((dv) => dv.setBigUint64(info + 13 + 8, 1n << 52n, true)), /tensor 'w' (dims|data)/);
  expectFormat(patch((dv) => dv.setBigUint64(info + 13 + 20, 16n, true)), /tensor 'w' offset/, /not a multiple of the alignment 32/);
  expectFormat(patch((dv) => dv.setBigUint64(info + 13 + 20, 64n, true)), /tensor 'w' data/, /runs past the end/);
  const dup = writeGGUF({ metadata: [["k", meta.u8(1)], ["k", meta.u8(2)]] });
  expectFormat(dup, /metadata\[1\] key/, /duplicate key 'k'/);
  const dupT = writeGGUF({ tensors: [1, 2].map(() => ({ name: "w", dtype: "f32" as const, shape: [1], data: new Uint8Array(4) })) });
  expectFormat(dupT, /tensor_info\[1\] name/, /duplicate tensor name 'w'/);
  const badAlign = writeGGUF({ metadata: { "general.alignment": meta.u32(24) } });
  expectFormat(badAlign, /general\.alignment/, /not a power of two/);
  const wrongAlignType = writeGGUF({ metadata: { "general.alignment": meta.u64(32) } });
  expectFormat(wrongAlignType, /general\.alignment/, /expected a u32, found u64/);
  // An array whose count cannot fit.
  const arr = writeGGUF({ metadata: { "a": meta.strings(["x"]) } });
  new DataView(arr.buffer).setBigUint64(24 + 9 + 4 + 4, 1n << 40n, true);
  expectFormat(arr, /metadata\[0\] 'a' count/, /cannot fit/);
});

test("openGGUF reads tensors on demand from the open file; after close() they are refused, metadata stays", () => {
  const g = openGGUF(STORIES);
  const info = g.info("blk.2.ffn_up.weight")!;
  assert.deepEqual(g.bytes(info.name), storiesBytes.subarray(info.offset, info.offset + info.byteLength));
  g.close();
  g.close(); // twice is harmless
  assert.equal(g.getU32("llama.block_count"), 5);
  const e = thrown(() => g.bytes(info.name));
  assert.ok(e instanceof ModelFormatError);
  assert.match(e.message, /tensor 'blk\.2\.ffn_up\.weight' data at offset \d+: the file was already closed/);
});

test("a FIFO or a character device is refused before it is opened (open() on a FIFO would block)", () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-gguf-"));
  try {
    const fifo = join(dir, "m.gguf");
    execFileSync("mkfifo", [fifo]);
    for (const path of [fifo, "/dev/null"]) {
      const e = thrown(() => openGGUF(path));
      assert.ok(e instanceof ModelNotFoundError, path);
      assert.match(e.message, /: cannot read model file: is not a regular file$/);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("metadata arrays nested past the bound are a NestingLimitError, not a stack overflow", () => {
  const deep = (depth: number) => {
    let a: GGUFArray = { type: "u8", value: new Uint8Array(0) };
    for (let i = 0; i < depth; i++) a = { type: "array", value: [a] };
    return writeGGUF({ metadata: { deep: meta.array(a) } });
  };
  assert.equal(parseGGUF(deep(7)).getArray("deep").type, "array");
  const e = thrown(() => parseGGUF(deep(8), "bad.gguf"));
  assert.ok(e instanceof NestingLimitError);
  assert.match(e.message, /^bad\.gguf: metadata\[0\] 'deep'(\[0\]){8} at offset \d+: arrays nested more than 8 deep$/);
});
