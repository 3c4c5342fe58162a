// Malformed GGUF files and model-file misuse, each with the exit code and the one line `poot run` must give.
// Covers issue 12 items 1-5 and 9-11 (shapes vs metadata, unbounded metadata, --ctx, huge non-GGUF files,
// FIFOs, terminal injection, prototype names, deep nesting) and the format itself: truncation in every
// section, overflowing counts, offsets past the end, misaligned data, duplicate names and keys, bad UTF-8,
// huge string lengths, unknown value types, wrong alignments. The seeded rng picks the layer, the cut, the
// wrong value: another seed exercises other bytes of the same class.
import { execFileSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { meta } from "../../llm/formats/gguf-write.ts";
import { type FuzzCase, pick } from "./case.ts";
import {
  baseModel, dropMeta, encode, layout, type Model, nestedArrays, patch, reshapeTensor, setMeta, stories, tensor,
} from "./gguf_gen.ts";

/** The command every model case runs: four tokens on the JS backend. */
export function runArgs(model: string, ...extra: string[]): string[] {
  return ["run", "--model", model, "--backend", "js", "--max-tokens", "4", "--prompt", "Once upon a time", ...extra];
}

function write(dir: string, bytes: Uint8Array, name = "model.gguf"): string {
  const path = join(dir, name);
  writeFileSync(path, bytes);
  return path;
}

const cases: FuzzCase[] = [];

/** A case whose file is stories260K edited as data. */
function model(name: string, cls: string, edit: (m: Model, rng: () => number) => Model | void, message: RegExp, error: string): void {
  cases.push({
    name: `gguf/${name}`, cls, exit: 1, message, error,
    setup(dir, rng) {
      const m = baseModel();
      return runArgs(write(dir, encode(edit(m, rng) ?? m)));
    },
  });
}

/** A case whose file is raw bytes (usually stories260K patched or cut at one field). */
function bytes(name: string, cls: string, make: (rng: () => number) => Uint8Array, message: RegExp, error: string): void {
  cases.push({ name: `gguf/${name}`, cls, exit: 1, message, error, setup: (dir, rng) => runArgs(write(dir, make(rng))) });
}

const L = (rng: () => number) => pick(rng, 0, 4); // a layer of stories260K
const base = () => layout(stories());
const U32 = (dv: DataView, at: number, v: number) => dv.setUint32(at, v, true);
const U64 = (dv: DataView, at: number, v: bigint) => dv.setBigUint64(at, v, true);

// ---- 12.1 tensors whose shape or dtype disagree with the config ----
const C1 = "12.1 shape/dtype vs metadata";
model("shape/ffn-171", C1, (m, r) => reshapeTensor(m, `blk.${L(r)}.ffn_up.weight`, r, [171, 64]),
  /TensorMismatchError: .*tensor 'blk\.\d\.ffn_up\.weight': shape \[171, 64\], but the config implies \[172, 64\]/, "TensorMismatchError");
model("shape/ffn-down-transposed", C1, (m, r) => reshapeTensor(m, `blk.${L(r)}.ffn_down.weight`, r, [172, 64]),
  /TensorMismatchError: .*ffn_down\.weight': shape \[172, 64\], but the config implies \[64, 172\]/, "TensorMismatchError");
model("shape/output-600", C1, (m, r) => reshapeTensor(m, "output.weight", r, [600, 64]),
  /TensorMismatchError: .*tensor 'output\.weight': shape \[600, 64\], but the config implies \[512, 64\]/, "TensorMismatchError");
model("shape/q-rows", C1, (m, r) => reshapeTensor(m, `blk.${L(r)}.attn_q.weight`, r, [pick(r, 1, 63), 64]),
  /TensorMismatchError: .*attn_q\.weight': shape \[\d+, 64\], but the config implies \[64, 64\]/, "TensorMismatchError");
model("shape/k-transposed", C1, (m, r) => reshapeTensor(m, `blk.${L(r)}.attn_k.weight`, r, [64, 32]),
  /TensorMismatchError: .*attn_k\.weight': shape \[64, 32\], but the config implies \[32, 64\]/, "TensorMismatchError");
model("shape/norm-2d", C1, (m, r) => reshapeTensor(m, `blk.${L(r)}.attn_norm.weight`, r, [1, 64]),
  /TensorMismatchError: .*attn_norm\.weight': shape \[1, 64\], but the config implies \[64\]/, "TensorMismatchError");
model("dtype/embedding-i32", C1, (m, r) => reshapeTensor(m, "token_embd.weight", r, [512, 64], "i32"),
  /TensorMismatchError: .*tensor 'token_embd\.weight': dtype i32, expected f32 or f16/, "TensorMismatchError");
// An f16 norm is widened to f32 at load (as llama.cpp reads it); an integer one is refused.
model("dtype/norm-i32", C1, (m, r) => reshapeTensor(m, "output_norm.weight", r, [64], "i32"),
  /TensorMismatchError: .*tensor 'output_norm\.weight': dtype i32, expected f32/, "TensorMismatchError");
model("dtype/matrix-i8", C1, (m, r) => reshapeTensor(m, `blk.${L(r)}.attn_v.weight`, r, [32, 64], "i8"),
  /TensorMismatchError: .*attn_v\.weight': dtype i8, expected f32 or f16/, "TensorMismatchError");
model("missing/ffn-down", C1, (m, r) => {
  const drop = `blk.${L(r)}.ffn_down.weight`;
  m.tensors = m.tensors.filter((t) => t.name !== drop);
}, /TensorMismatchError: .*ffn_down\.weight': missing/, "TensorMismatchError");
model("shape/embedding-3d", C1, (m, r) => reshapeTensor(m, "token_embd.weight", r, [8, 64, 64]),
  /MetadataError: .*token_embd\.weight.*expected a 2-D/, "MetadataError");
model("shape/vocab-vs-tokens", C1, (m, r) => {
  reshapeTensor(m, "token_embd.weight", r, [600, 64]);
  reshapeTensor(m, "output.weight", r, [600, 64]);
}, /MetadataError: .*'tokenizer\.ggml\.tokens': 512 tokens but token_embd\.weight has 600 rows/, "MetadataError");
model("shape/rope-freqs", C1, (m, r) => {
  m.tensors.push({ name: "rope_freqs.weight", dtype: "f32", shape: [pick(r, 5, 9)], data: new Uint8Array(0) });
  reshapeTensor(m, "rope_freqs.weight", r, tensor(m, "rope_freqs.weight").shape);
}, /TensorMismatchError: .*rope_freqs\.weight': shape \[\d\], but the config implies \[4\]|TensorMismatchError: .*rope_freqs/, "TensorMismatchError");

// ---- 12.2 metadata that would size unbounded work ----
const C2 = "12.2 config validation";
const metaErr = (key: string, problem: string) => new RegExp(`MetadataError: .*metadata '${key.replaceAll(".", "\\.")}': ${problem}`);
model("meta/block-count-2^32-1", C2, (m) => setMeta(m, "llama.block_count", meta.u32(0xffffffff)),
  metaErr("llama.block_count", "4294967295 is more than 48 \\(the file has 48 tensors\\)"), "MetadataError");
model("meta/block-count-1e6", C2, (m) => setMeta(m, "llama.block_count", meta.u32(1_000_000)),
  metaErr("llama.block_count", "1000000 is more than 48"), "MetadataError");
model("meta/block-count-0", C2, (m) => setMeta(m, "llama.block_count", meta.u32(0)),
  metaErr("llama.block_count", "0 is not a whole number of at least 1"), "MetadataError");
model("meta/block-count-string", C2, (m) => setMeta(m, "llama.block_count", meta.string("five")),
  metaErr("llama.block_count", "expected a u32, found string"), "MetadataError");
model("meta/head-count-0", C2, (m) => setMeta(m, "llama.attention.head_count", meta.u32(0)),
  metaErr("llama.attention.head_count", "0 is not a whole number"), "MetadataError");
model("meta/head-count-indivisible", C2, (m, r) => setMeta(m, "llama.attention.head_count", meta.u32([3, 5, 6, 7][pick(r, 0, 3)])),
  /MetadataError: .*metadata 'llama\.(attention\.head_count(_kv)?|embedding_length)': \d+ is (not a multiple of|more than)/, "MetadataError");
model("meta/kv-heads-indivisible", C2, (m) => setMeta(m, "llama.attention.head_count_kv", meta.u32(3)),
  metaErr("llama.attention.head_count", "8 is not a multiple of llama\\.attention\\.head_count_kv = 3"), "MetadataError");
model("meta/kv-heads-more-than-heads", C2, (m) => setMeta(m, "llama.attention.head_count_kv", meta.u32(16)),
  metaErr("llama.attention.head_count_kv", "16 is more than 8"), "MetadataError");
model("meta/embedding-length-0", C2, (m) => setMeta(m, "llama.embedding_length", meta.u32(0)),
  metaErr("llama.embedding_length", "0 is not a whole number"), "MetadataError");
model("meta/embedding-length-missing", C2, (m) => dropMeta(m, "llama.embedding_length"),
  metaErr("llama.embedding_length", "missing"), "MetadataError");
model("meta/ffn-0", C2, (m) => setMeta(m, "llama.feed_forward_length", meta.u32(0)),
  metaErr("llama.feed_forward_length", "0 is not a whole number"), "MetadataError");
for (const [tag, v] of [["0", 0], ["negative", -1e-5], ["nan", NaN], ["inf", Infinity]] as const) {
  model(`meta/eps-${tag}`, C2, (m) => setMeta(m, "llama.attention.layer_norm_rms_epsilon", meta.f32(v)),
    metaErr("llama.attention.layer_norm_rms_epsilon", "-?(0|1e-5|[\\d.e-]+|NaN|Infinity) must be a finite number above 0"), "MetadataError");
}
for (const [tag, v] of [["0", 0], ["negative", -10000], ["nan", NaN]] as const) {
  model(`meta/rope-theta-${tag}`, C2, (m) => setMeta(m, "llama.rope.freq_base", meta.f32(v)),
    metaErr("llama.rope.freq_base", "-?[\\w.]+ must be a finite number above 0"), "MetadataError");
}
model("meta/rope-dims-odd", C2, (m) => setMeta(m, "llama.rope.dimension_count", meta.u32(7)),
  metaErr("llama.rope.dimension_count", "7 must be even"), "MetadataError");
model("meta/rope-dims-past-head", C2, (m) => setMeta(m, "llama.rope.dimension_count", meta.u32(16)),
  metaErr("llama.rope.dimension_count", "16 is more than 8"), "MetadataError");
// Dims in range but not what the tensors hold: refused by the tensor check before anything is sized from them.
model("meta/embedding-length-vs-tensors", C2, (m, r) => setMeta(m, "llama.embedding_length", meta.u32(64 * pick(r, 2, 64))),
  /TensorMismatchError: .*tensor 'token_embd\.weight': shape \[512, 64\], but the config implies \[512, \d+\]/, "TensorMismatchError");
model("meta/key-length-vs-tensors", C2, (m) => setMeta(m, "llama.attention.key_length", meta.u32(16)),
  /TensorMismatchError: .*attn_q\.weight': shape \[64, 64\], but the config implies \[128, 64\]/, "TensorMismatchError");
model("meta/ffn-2^24", C2, (m) => setMeta(m, "llama.feed_forward_length", meta.u32(2 ** 24)),
  /TensorMismatchError: .*ffn_gate\.weight': shape \[172, 64\], but the config implies \[16777216, 64\]/, "TensorMismatchError");
model("meta/context-length-0", C2, (m) => setMeta(m, "llama.context_length", meta.u32(0)),
  metaErr("llama.context_length", "0 is not a whole number of at least 2"), "MetadataError");

// ---- 12.3 a context beyond the model or the device ----
const C3 = "12.3 --ctx beyond reason";
const ctxCase = (name: string, extra: string[], message: RegExp) =>
  cases.push({ name: `gguf/${name}`, cls: C3, exit: 1, message, error: "ContextLengthError", setup: (dir) => runArgs(write(dir, stories()), ...extra) });
ctxCase("ctx/5e6", ["--ctx", "5000000"],
  /ContextLengthError: context of 5000000 positions: more than the 2048 the model was trained for \(llama\.context_length\); pass --allow-long-context/);
ctxCase("ctx/1e9", ["--ctx", "1000000000"], /ContextLengthError: context of 1000000000 positions: more than the 2048/);
ctxCase("ctx/past-device-memory", ["--ctx", "2000000000", "--allow-long-context"],
  /ContextLengthError: context of 2000000000 positions: needs [\d.]+ GiB for the KV cache beside [\d.]+ MiB of weights, more than the [\d.]+ GiB/);

// ---- 12.4 / 12.5 what --model points at ----
const C4 = "12.4 large non-GGUF file";
const C5 = "12.5 non-regular path";
const sparse = (dir: string, head: Uint8Array, size: number) => {
  const path = join(dir, "big.bin");
  const fd = openSync(path, "w");
  writeSync(fd, head, 0, head.length, 0);
  writeSync(fd, new Uint8Array(1), 0, 1, size - 1); // a hole: 4 GiB on paper, a few bytes on disk
  closeSync(fd);
  return path;
};
cases.push({
  name: "gguf/big/not-gguf-4GiB", cls: C4, exit: 1, error: "ModelFormatError",
  message: /ModelFormatError: .*big\.bin: header\.magic at offset 0: not a GGUF file \(starts with "PK\.\.", expected "GGUF"\)/,
  setup: (dir) => runArgs(sparse(dir, Uint8Array.of(0x50, 0x4b, 3, 4), 4 * 2 ** 30)),
});
cases.push({
  name: "gguf/big/header-past-limit", cls: C4, exit: 1, error: "ModelFormatError",
  message: /ModelFormatError: .*metadata\[0\] 'x' count at offset \d+: \d+ u8 elements cannot fit in the \d+ bytes left/,
  setup(dir) {
    // A 3 GiB array of u8 in a 4 GiB file: more than the header may take, refused before reading it.
    const h = new Uint8Array(24 + 9 + 4 + 12);
    const dv = new DataView(h.buffer);
    h.set([0x47, 0x47, 0x55, 0x46]);
    U32(dv, 4, 3);
    U64(dv, 16, 1n);
    U64(dv, 24, 1n);
    h[32] = 0x78; // "x"
    U32(dv, 33, 9);
    U32(dv, 37, 0);
    U64(dv, 41, 3n * 2n ** 30n);
    return runArgs(sparse(dir, h, 4 * 2 ** 30));
  },
});
cases.push({
  name: "gguf/path/fifo", cls: C5, exit: 1, error: "ModelNotFoundError",
  message: /ModelNotFoundError: .*model\.fifo: cannot read model file: is not a regular file/,
  setup(dir) {
    const path = join(dir, "model.fifo");
    execFileSync("mkfifo", [path]);
    return runArgs(path);
  },
});
cases.push({
  name: "gguf/path/char-device", cls: C5, exit: 1, error: "ModelNotFoundError",
  message: /ModelNotFoundError: \/dev\/zero: cannot read model file: is not a regular file/, setup: () => runArgs("/dev/zero"),
});
cases.push({
  name: "gguf/path/directory", cls: C5, exit: 1, error: "ModelNotFoundError",
  message: /ModelNotFoundError: .*: cannot read model file: a Hugging Face folder needs config\.json/,
  setup(dir) {
    mkdirSync(join(dir, "m.gguf"));
    return runArgs(join(dir, "m.gguf"));
  },
});
cases.push({
  name: "gguf/path/missing", cls: C5, exit: 1, error: "ModelNotFoundError",
  message: /ModelNotFoundError: .*nope\.gguf: cannot read model file: no such file/, setup: (dir) => runArgs(join(dir, "nope.gguf")),
});

// ---- 12.9 control characters from a model file ----
const C9 = "12.9 terminal injection";
model("inject/architecture", C9, (m) => setMeta(m, "general.architecture", meta.string("\x1b[2J\x1b[H\nllama")),
  /UnknownArchitectureError: unknown architecture '\\x1b\[2J\\x1b\[H\\nllama'/, "UnknownArchitectureError");
model("inject/tensor-name", C9, (m) => {
  m.tensors.push({ name: "evil\x1b]0;owned\x07\r\n", dtype: "f32", shape: [32], data: new Uint8Array(128), ggmlType: 99 });
}, /UnsupportedTensorTypeError: .*tensor 'evil\\x1b\]0;owned\\x07\\r\\n' has unknown ggml type id 99/, "UnsupportedTensorTypeError");
cases.push({
  name: "gguf/inject/duplicate-key", cls: C9, exit: 1, error: "ModelFormatError",
  message: /ModelFormatError: .*duplicate key 'a\\nb\\x1b\[31m'/,
  setup: (dir) => runArgs(write(dir, encode({ metadata: [["a\nb\x1b[31m", meta.u8(1)], ["a\nb\x1b[31m", meta.u8(2)]], tensors: [] }))),
});
cases.push({
  name: "gguf/inject/model-path", cls: C9, exit: 1, error: "ModelNotFoundError",
  message: /ModelNotFoundError: .*evil\\x1b\[2J\\n\.gguf: cannot read model file: no such file/,
  setup: (dir) => runArgs(join(dir, "evil\x1b[2J\n.gguf")),
});
model("inject/long-architecture", C9, (m, r) => setMeta(m, "general.architecture", meta.string("A".repeat(pick(r, 5000, 50000)))),
  /UnknownArchitectureError: unknown architecture 'A{120}\.\.\. \(\d+ more\)'/, "UnknownArchitectureError");

// ---- 12.10 architecture names on Object.prototype ----
for (const arch of ["constructor", "toString", "__proto__", "hasOwnProperty", "valueOf"]) {
  model(`registry/${arch}`, "12.10 prototype lookups", (m) => setMeta(m, "general.architecture", meta.string(arch)),
    new RegExp(`UnknownArchitectureError: unknown architecture '${arch}' \\(supported: llama`), "UnknownArchitectureError");
}
model("registry/missing", "12.10 prototype lookups", (m) => dropMeta(m, "general.architecture"),
  /UnknownArchitectureError: unknown architecture '\(none: general\.architecture is missing\)'/, "UnknownArchitectureError");

// ---- 12.11 nesting ----
bytes("nesting/20000", "12.11 metadata nesting", () => nestedArrays("deep", 20000),
  /NestingLimitError: .*metadata\[0\] 'deep'(\[0\])+ at offset \d+: arrays nested more than 8 deep/, "NestingLimitError");
bytes("nesting/9", "12.11 metadata nesting", () => nestedArrays("deep", 8),
  /NestingLimitError: .*arrays nested more than 8 deep/, "NestingLimitError");
// Eight levels are allowed: the file gets past its metadata and is refused for what it lacks.
bytes("nesting/8-allowed", "12.11 metadata nesting", () => nestedArrays("deep", 7),
  /UnknownArchitectureError: unknown architecture '\(none: general\.architecture is missing\)'/, "UnknownArchitectureError");

// ---- the format: truncation in every section ----
const CT = "format: truncation";
const cut = (name: string, at: (rng: () => number) => number, message: RegExp) =>
  bytes(`truncate/${name}`, CT, (r) => stories().slice(0, at(r)), message, "ModelFormatError");
cut("magic", (r) => pick(r, 0, 3), /ModelFormatError: .*header\.magic at offset 0: not a GGUF file: only \d bytes/);
cut("header", (r) => pick(r, 4, 23), /ModelFormatError: .*header\.(version|tensor_count|metadata_kv_count) at offset \d+: (truncated|\d+ entries cannot fit)/);
cut("metadata-key", (r) => {
  const kv = base().kv[pick(r, 1, base().kv.length - 1)];
  return pick(r, kv.start, kv.typeAt - 1);
}, /ModelFormatError: .*(metadata\[\d+\] key|header\.metadata_kv_count).*(truncated|runs past|cannot fit)/);
cut("metadata-value", (r) => {
  const kv = base().kv.filter((k) => k.end - k.valueAt > 1)[pick(r, 0, 5)];
  return pick(r, kv.valueAt, kv.end - 1);
}, /ModelFormatError: .*(metadata\[\d+\] '[\w.]+'|header\.metadata_kv_count).*(truncated|runs past|cannot fit)/);
cut("tokens-array", (r) => {
  const kv = base().kv.find((k) => k.key === "tokenizer.ggml.tokens")!;
  return pick(r, kv.valueAt + 12, kv.end - 1);
}, /ModelFormatError: .*(metadata\[\d+\] 'tokenizer\.ggml\.tokens'|header\.metadata_kv_count).*(truncated|runs past|cannot fit)/);
cut("tensor-info", (r) => {
  const t = base().infos[pick(r, 0, base().infos.length - 1)];
  return pick(r, t.start, t.end - 1);
}, /ModelFormatError: .*(tensor_info\[\d+\]|tensor '[\w.]+' (n_dims|dims|type|offset)|header\.tensor_count).*(truncated|runs past|cannot fit)/);
cut("padding", () => base().dataOffset - 1, /ModelFormatError: .*tensor '[\w.]+' (data|offset) at offset \d+: truncated/);
cut("data", (r) => pick(r, base().dataOffset, stories().length - 1), /ModelFormatError: .*tensor '[\w.]+' data at offset \d+: truncated: data \[\d+, \d+\) runs past the end/);
bytes("truncate/empty", CT, () => new Uint8Array(0), /ModelFormatError: .*header\.magic at offset 0: not a GGUF file: only 0 bytes/, "ModelFormatError");

// ---- the format: counts, lengths and offsets that lie ----
const CC = "format: overflowing counts/lengths/offsets";
const field = (name: string, cls: string, f: (dv: DataView, r: () => number, b: Uint8Array) => void, message: RegExp, error = "ModelFormatError") =>
  bytes(name, cls, (r) => patch(stories(), (dv, b) => f(dv, r, b)), message, error);
field("count/tensors-2^64-1", CC, (dv) => U64(dv, 8, 2n ** 64n - 1n), /ModelFormatError: .*header\.tensor_count at offset 8: value 18446744073709551615 is too large/);
field("count/tensors-2^40", CC, (dv) => U64(dv, 8, 2n ** 40n), /ModelFormatError: .*header\.tensor_count at offset 8: 1099511627776 tensor infos cannot fit/);
field("count/kv-2^63", CC, (dv) => U64(dv, 16, 2n ** 63n), /ModelFormatError: .*header\.metadata_kv_count at offset 16: value \d+ is too large/);
field("count/kv-2^32", CC, (dv) => U64(dv, 16, 2n ** 32n), /ModelFormatError: .*header\.metadata_kv_count at offset 16: 4294967296 entries cannot fit/);
field("count/array-huge", CC, (dv, r) => {
  const kv = base().kv.find((k) => k.key === "tokenizer.ggml.scores")!;
  U64(dv, kv.valueAt + 4, BigInt(pick(r, 2 ** 21, 2 ** 40)));
}, /ModelFormatError: .*'tokenizer\.ggml\.scores' count at offset \d+: \d+ f32 elements cannot fit/);
field("length/key-2^64-1", CC, (dv) => U64(dv, base().kv[1].start, 2n ** 64n - 1n), /ModelFormatError: .*metadata\[1\] key length at offset \d+: value \d+ is too large/);
field("length/value-2^40", CC, (dv) => {
  const kv = base().kv.find((k) => k.key === "general.architecture")!;
  U64(dv, kv.valueAt, 2n ** 40n);
}, /ModelFormatError: .*'general\.architecture' length at offset \d+: string length 1099511627776 runs past the end/);
field("length/token-2^33", CC, (dv, r) => {
  const kv = base().kv.find((k) => k.key === "tokenizer.ggml.tokens")!;
  let at = kv.valueAt + 12;
  for (let i = pick(r, 0, 100); i > 0; i--) at += 8 + Number(dv.getBigUint64(at, true));
  U64(dv, at, 2n ** 33n);
}, /ModelFormatError: .*'tokenizer\.ggml\.tokens'\[\d+\] length at offset \d+: string length 8589934592 runs past the end/);
field("dims/overflow", CC, (dv, r) => {
  const matrices = base().infos.filter((t) => t.typeAt - t.dimsAt === 16);
  const t = matrices[pick(r, 0, matrices.length - 1)];
  U64(dv, t.dimsAt, 2n ** 30n);
  U64(dv, t.dimsAt + 8, 2n ** 30n);
}, /ModelFormatError: .*tensor '[\w.]+' dims\[1\] at offset \d+: element count overflows|tensor '[\w.]+' data .*runs past the end/);
field("offset/past-end", CC, (dv, r) => U64(dv, base().infos[pick(r, 0, 47)].offsetAt, 2n ** 40n),
  /ModelFormatError: .*tensor '[\w.]+' data at offset \d+: truncated: data \[\d+, \d+\) runs past the end/);
field("offset/misaligned", CC, (dv, r) => {
  const t = base().infos[pick(r, 0, 47)];
  U64(dv, t.offsetAt, dv.getBigUint64(t.offsetAt, true) + BigInt(pick(r, 1, 31)));
}, /ModelFormatError: .*tensor '[\w.]+' offset at offset \d+: data offset \d+ is not a multiple of the alignment 32/);
field("dims/n-dims-5", CC, (dv, r) => U32(dv, base().infos[pick(r, 0, 47)].ndimsAt, pick(r, 5, 2 ** 32 - 1)),
  /ModelFormatError: .*tensor '[\w.]+' n_dims at offset \d+: \d+ dims, at most 4/);

// ---- the format: duplicates, UTF-8, types, versions, alignment ----
const CF = "format: fields";
cases.push({
  name: "gguf/duplicate/tensor-name", cls: CF, exit: 1, error: "ModelFormatError",
  message: /ModelFormatError: .*tensor_info\[\d+\] name at offset \d+: duplicate tensor name 'blk\.\d\.attn_q\.weight'/,
  setup(dir, r) {
    const m = baseModel();
    const l = L(r);
    tensor(m, `blk.${l}.attn_output.weight`).name = `blk.${l}.attn_q.weight`;
    return runArgs(write(dir, encode(m)));
  },
});
model("duplicate/key", CF, (m) => {
  m.metadata.push(["llama.block_count", meta.u32(5)]);
}, /ModelFormatError: .*metadata\[\d+\] key at offset \d+: duplicate key 'llama\.block_count'/, "ModelFormatError");
field("utf8/key", CF, (_dv, r, b) => {
  const kv = base().kv[pick(r, 0, base().kv.length - 1)];
  b[kv.start + 8] = 0xff;
}, /ModelFormatError: .*metadata\[\d+\] key at offset \d+: not valid UTF-8/);
field("utf8/tensor-name", CF, (_dv, r, b) => {
  const t = base().infos[pick(r, 0, 47)];
  b.set([0xc3, 0x28], t.start + 8);
}, /ModelFormatError: .*tensor_info\[\d+\] name at offset \d+: not valid UTF-8/);
field("type/value-13", CF, (dv, r) => U32(dv, base().kv[pick(r, 0, base().kv.length - 1)].typeAt, pick(r, 13, 2 ** 32 - 1)),
  /ModelFormatError: .*metadata\[\d+\] '[\w.]+' type at offset \d+: unknown metadata value type id \d+/);
field("type/array-element", CF, (dv, r) => {
  const kv = base().kv.find((k) => k.key === "tokenizer.ggml.tokens")!;
  U32(dv, kv.valueAt, pick(r, 13, 1000));
}, /ModelFormatError: .*'tokenizer\.ggml\.tokens' element type at offset \d+: unknown metadata value type id \d+/);
field("type/tensor-99", CF, (dv, r) => U32(dv, base().infos[pick(r, 0, 47)].typeAt, 99),
  /UnsupportedTensorTypeError: .*tensor '[\w.]+' has unknown ggml type id 99/, "UnsupportedTensorTypeError");
field("type/tensor-tq1", CF, (dv, r) => U32(dv, base().infos[pick(r, 0, 47)].typeAt, 34),
  /UnsupportedTensorTypeError: .*has ggml type TQ1_0 \(id 34\), which is not supported/, "UnsupportedTensorTypeError");
field("version/1", CF, (dv) => U32(dv, 4, 1), /UnsupportedFormatError: .*header\.version at offset 4: GGUF version 1 is not supported/, "UnsupportedFormatError");
field("version/big-endian", CF, (dv) => dv.setUint32(4, 3, false), /UnsupportedFormatError: .*big-endian GGUF files are not supported/, "UnsupportedFormatError");
field("version/other", CF, (dv, r) => U32(dv, 4, pick(r, 4, 0xfffe)), /UnsupportedFormatError: .*GGUF version \d+ is not supported/, "UnsupportedFormatError");
field("magic/text", CF, (_dv, _r, b) => b.set(new TextEncoder().encode("#!/b")), /ModelFormatError: .*header\.magic at offset 0: not a GGUF file \(starts with "#!\/b"/);
for (const [tag, v, problem] of [
  ["0", meta.u32(0), "alignment 0 is not a power of two"],
  ["24", meta.u32(24), "alignment 24 is not a power of two"],
  ["3", meta.u32(3), "alignment 3 is not a power of two"],
  ["u64", meta.u64(32), "expected a u32, found u64"],
] as const) {
  model(`alignment/${tag}`, CF, (m) => setMeta(m, "general.alignment", v),
    new RegExp(`ModelFormatError: .*metadata 'general\\.alignment' at offset 0: ${problem}`), "ModelFormatError");
}
model("alignment/2^30", CF, (m) => setMeta(m, "general.alignment", meta.u32(2 ** 30)),
  /ModelFormatError: .*tensor '[\w.]+' (data at offset \d+: truncated: data \[\d+, \d+\) runs past the end|offset at offset \d+: data offset \d+ is not a multiple of the alignment 1073741824)/, "ModelFormatError");

export { cases };
