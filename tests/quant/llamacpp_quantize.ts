// Imported by tests/quant/ggml.test.ts (see there why it is not a test file of its own).
// `poot quantize` against llama.cpp's own llama_model_quantize (libllama from node-llama-cpp's prebuilt
// binaries, called through ffi/): for stories260K (64/172-wide rows: every fallback path) and a synthetic
// 256-wide Llama (real q4_k/q5_k/q6_k blocks, use_more_bits layers), every tensor gets the same type and the
// same bytes, and the metadata is the same. (llama.cpp writes the tensors in its own order; names are compared.)
import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { cstr, defineSymbols, dlopen } from "../../ffi/lib.ts";
import { openGGUF } from "../../llm/formats/gguf.ts";
import { meta, writeGGUF } from "../../llm/formats/gguf-write.ts";
import { FTYPE_ID, QUANT_FTYPES } from "../../llm/formats/quantize.ts";
import { parseCustom } from "../../bench/shapes.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const BINS = `${root}node_modules/@node-llama-cpp/linux-x64/bins/linux-x64`;
const pkg = `${root}node_modules/node-llama-cpp/package.json`;
// llama_model_quantize_params is passed by pointer; its layout is that of the pinned node-llama-cpp release.
const skip = process.platform !== "linux" || process.arch !== "x64" ? "llama.cpp prebuilt for linux-x64 only"
  : !existsSync(`${BINS}/libllama.v0.4.0.so`) || !existsSync(pkg) ? "node-llama-cpp's libllama is not installed (npm ci)"
  : JSON.parse(readFileSync(pkg, "utf8")).version !== "3.21.1" ? "the params layout is known for node-llama-cpp 3.21.1 only" : false;

const symbols = defineSymbols({
  llama_backend_init: { args: [], result: "void" },
  llama_model_quantize: { args: ["buffer", "buffer", "buffer"], result: "u32" },
});

/** llama_model_quantize_params as llama_model_quantize_default_params fills it, with nthread 1 and `ftype`. */
function params(ftype: number): Uint8Array {
  const p = new Uint8Array(64); // int32 nthread, ftype, output/token-embedding type (GGML_TYPE_COUNT = 43), 5 bools, 4 pointers
  const dv = new DataView(p.buffer);
  dv.setInt32(0, 1, true);
  dv.setInt32(4, ftype, true);
  dv.setInt32(8, 43, true);
  dv.setInt32(12, 43, true);
  p[17] = 1; // quantize_output_tensor
  return p;
}

function poot(args: string[]): { status: number | null; stderr: string } {
  const D = (globalThis as unknown as { Deno?: { execPath(): string } }).Deno;
  const cmd = D ? D.execPath() : process.execPath;
  const pre = D ? ["run", "-A", "--no-check", `${root}cli/main.ts`] : [`${root}cli/main.ts`];
  const r = spawnSync(cmd, [...pre, ...args], { encoding: "utf8", timeout: 300_000 });
  return { status: r.status, stderr: r.stderr };
}

/** A 256-wide, 4-layer Llama GGUF with stories' tokenizer and synthetic f32 weights. */
function wideModel(path: string): void {
  const s = openGGUF(`${root}models/stories260K/stories260K.gguf`);
  const cfg = parseCustom("dim=256,hidden=512,layers=4,heads=4,kvHeads=2,headDim=64,vocab=512,tiedEmbeddings=false");
  const m = syntheticLlama(cfg, { dtype: "f32" });
  const md = new Map(s.metadata);
  md.set("llama.embedding_length", meta.u32(256));
  md.set("llama.feed_forward_length", meta.u32(512));
  md.set("llama.attention.head_count", meta.u32(4));
  md.set("llama.attention.head_count_kv", meta.u32(2));
  md.set("llama.rope.dimension_count", meta.u32(64));
  md.set("llama.block_count", meta.u32(4));
  const tensors = [...m.store.tensors()].map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: m.store.bytes(t.name).slice() }));
  writeFileSync(path, writeGGUF({ metadata: md, tensors }));
}

test("poot quantize writes the same tensors and metadata as llama.cpp's llama_model_quantize", { skip, timeout: 600_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-llq-"));
  const deps = [dlopen(`${BINS}/libggml-base.so`, {}), dlopen(`${BINS}/libggml.v0.4.0.so`, {})];
  const lib = dlopen(`${BINS}/libllama.v0.4.0.so`, symbols);
  const bad: string[] = [];
  try {
    lib.symbols.llama_backend_init();
    const wide = join(dir, "wide.gguf");
    wideModel(wide);
    for (const [label, src] of [["stories260K", `${root}models/stories260K/stories260K.gguf`], ["wide", wide]]) {
      for (const ft of QUANT_FTYPES) {
        const ours = join(dir, `${label}-${ft}.gguf`), theirs = join(dir, `${label}-${ft}-llama.gguf`);
        const r = poot(["quantize", src, ours, "--type", ft, "--quiet"]);
        assert.equal(r.status, 0, r.stderr);
        assert.equal(lib.symbols.llama_model_quantize(cstr(src), cstr(theirs), params(FTYPE_ID[ft])), 0, `llama.cpp failed on ${label} ${ft}`);
        const a = openGGUF(ours), b = openGGUF(theirs);
        assert.deepEqual([...a.tensors()].map((t) => t.name).sort(), [...b.tensors()].map((t) => t.name).sort());
        for (const t of b.tensors()) {
          const o = a.info(t.name)!;
          if (o.dtype !== t.dtype) bad.push(`${label} ${ft} ${t.name}: poot ${o.dtype}, llama.cpp ${t.dtype}`);
          else {
            const x = a.bytes(t.name), y = b.bytes(t.name), k = x.findIndex((v, i) => v !== y[i]);
            if (k >= 0 || x.length !== y.length) bad.push(`${label} ${ft} ${t.name} (${t.dtype}): first differing byte ${k}`);
          }
        }
        const str = (v: unknown) => JSON.stringify(v, (_, x) => (typeof x === "bigint" ? String(x) : x));
        for (const k of new Set([...a.metadata.keys(), ...b.metadata.keys()])) {
          if (str(a.metadata.get(k)) !== str(b.metadata.get(k))) bad.push(`${label} ${ft} metadata ${k}: poot ${str(a.metadata.get(k))}, llama.cpp ${str(b.metadata.get(k))}`);
        }
      }
    }
  } finally {
    // Never closed: reloading ggml in one process aborts it (see tests/quant/ggml.test.ts).
    void lib, deps;
    rmSync(dir, { recursive: true, force: true });
  }
  assert.deepEqual(bad, []);
});
