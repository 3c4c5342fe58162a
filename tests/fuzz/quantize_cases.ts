// Fuzz cases of `poot quantize` (the shared FuzzCase shape; badinput's runner runs every tests/fuzz/*_cases.ts):
// a bad command line exits 2, bad input exits 1, each with one `poot:` line on stderr and nothing written
// outside the case's folder (a failed quantize leaves no OUT and no temporary file).
import { Buffer } from "node:buffer";
import { cpSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { writeGGUF } from "../../llm/formats/gguf-write.ts";
import { quantize } from "../../llm/formats/quant.ts";

import type { FuzzCase } from "./case.ts";

const stories = fileURLToPath(new URL("../../models/stories260K/stories260K.gguf", import.meta.url));
const fixtures = fileURLToPath(new URL("../families/fixtures/", import.meta.url));

/** A copy of a family fixture folder under `dir`, with `edit(folder)` applied. */
function hfCopy(dir: string, family: string, edit: (folder: string) => void): string {
  const f = join(dir, family);
  cpSync(join(fixtures, family), f, { recursive: true });
  edit(f);
  return f;
}

function editJson(path: string, edit: (j: Record<string, unknown>) => void): void {
  const j = JSON.parse(readFileSync(path, "utf8"));
  edit(j);
  writeFileSync(path, JSON.stringify(j));
}
const CLS = "16 poot quantize command line and input";

/** A small GGUF whose one matrix is already q8_0. */
function quantizedFile(dir: string, rng: () => number): string {
  const x = Array.from({ length: 32 * 64 }, () => rng() - 0.5);
  const f = join(dir, "q8.gguf");
  writeFileSync(f, writeGGUF({ tensors: [{ name: "blk.0.attn_q.weight", dtype: "q8_0", shape: [32, 64], data: quantize("q8_0", x) }] }));
  return f;
}

export const cases: FuzzCase[] = [
  { name: "quantize/usage/no-type", cls: CLS, setup: (d) => ["quantize", stories, join(d, "o.gguf")], exit: 2, message: /--type is required/ },
  { name: "quantize/usage/bad-type", cls: CLS, setup: (d) => ["quantize", stories, join(d, "o.gguf"), "--type", "q3_k_s"], exit: 2, message: /--type: "q3_k_s" is not one of f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k/ },
  { name: "quantize/usage/one-path", cls: CLS, setup: () => ["quantize", stories, "--type", "q8_0"], exit: 2, message: /expected IN and OUT, got 1 path/ },
  { name: "quantize/usage/unknown-flag", cls: CLS, setup: (d) => ["quantize", stories, join(d, "o.gguf"), "--type", "q8_0", "--imatrix", "x"], exit: 2, message: /quantize: Unknown option '--imatrix'/ },
  {
    name: "quantize/usage/same-file", cls: CLS, exit: 2, message: /OUT is the same file as IN/,
    setup: (d) => {
      const f = join(d, "m.gguf");
      writeFileSync(f, writeGGUF({ tensors: [] }));
      return ["quantize", f, f, "--type", "q8_0"];
    },
  },
  { name: "quantize/input/missing", cls: CLS, setup: (d) => ["quantize", join(d, "nope.gguf"), join(d, "o.gguf"), "--type", "q8_0"], exit: 1, message: /nope\.gguf/ },
  {
    name: "quantize/input/not-gguf", cls: CLS, exit: 1, message: /not a GGUF file/,
    setup: (d, rng) => {
      const f = join(d, "junk.gguf");
      writeFileSync(f, Uint8Array.from({ length: 256 }, () => Math.floor(rng() * 256)));
      return ["quantize", f, join(d, "o.gguf"), "--type", "q4_k_m"];
    },
  },
  {
    name: "quantize/input/folder-empty", cls: CLS, exit: 1, message: /a Hugging Face folder needs config\.json/,
    setup: (d) => {
      mkdirSync(join(d, "hf"));
      return ["quantize", join(d, "hf"), join(d, "o.gguf"), "--type", "q8_0"];
    },
  },
  {
    name: "quantize/input/hf-unknown-architecture", cls: CLS, exit: 1, message: /unknown architecture 'FooForCausalLM'/, error: "UnknownArchitectureError",
    setup: (d) => {
      const f = hfCopy(d, "qwen3", (f) => editJson(join(f, "config.json"), (j) => {
        j.architectures = ["FooForCausalLM"];
        j.model_type = "foo";
      }));
      return ["quantize", f, join(d, "o.gguf"), "--type", "f16"];
    },
  },
  {
    name: "quantize/input/hf-missing-tensor", cls: CLS, exit: 1, message: /model\.layers\.1\.self_attn\.q_proj\.weight/, error: "TensorMismatchError",
    setup: (d) => {
      // Renamed in the safetensors header (same length, so the header stays valid): q_proj is missing.
      const f = hfCopy(d, "qwen3", (f) => {
        const p = join(f, "model.safetensors"), b = readFileSync(p), from = Buffer.from("model.layers.1.self_attn.q_proj.weight");
        b.subarray(b.indexOf(from)).write("model.layers.1.self_attn.x_proj.weight");
        writeFileSync(p, b);
      });
      return ["quantize", f, join(d, "o.gguf"), "--type", "q8_0"];
    },
  },
  {
    name: "quantize/input/hf-tokenizer-without-gguf-form", cls: CLS, exit: 1, message: /normalizer \(Lowercase\) has no GGUF form/, error: "ConvertError",
    setup: (d) => {
      const f = hfCopy(d, "qwen3", (f) => editJson(join(f, "tokenizer.json"), (j) => {
        j.normalizer = { type: "Lowercase" };
      }));
      return ["quantize", f, join(d, "o.gguf"), "--type", "q4_k_m"];
    },
  },
  { name: "quantize/input/requantize", cls: CLS, setup: (d, rng) => ["quantize", quantizedFile(d, rng), join(d, "o.gguf"), "--type", "q4_0"], exit: 1, message: /already quantized \(q8_0\).*--allow-requantize/ },
  { name: "quantize/output/no-folder", cls: CLS, setup: (d) => ["quantize", stories, join(d, "no", "o.gguf"), "--type", "q8_0"], exit: 1, message: /cannot write .*: .* is not a folder/ },
];
