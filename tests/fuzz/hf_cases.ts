// Malformed Hugging Face folders and chat inputs for the fuzz runner (tests/fuzz/, see FuzzCase): each case
// copies the small qwen2 fixture (tests/families/fixtures/qwen2) into `dir`, breaks one thing with the seeded
// rng, and expects `poot run` to fail with exit 1 and one line naming what is wrong. Nothing reaches a device:
// every check runs before the backend is opened. tests/families/bad_input.test.ts runs the same cases in-process.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import type { FuzzCase } from "./case.ts";

const SOURCE = fileURLToPath(new URL("../families/fixtures/qwen2/", import.meta.url));

/** A copy of the qwen2 fixture folder under dir/model; returns its path. */
export function copyFixture(dir: string): string {
  const m = join(dir, "model");
  mkdirSync(m, { recursive: true });
  for (const f of readdirSync(SOURCE)) if (f !== "expected.json") copyFileSync(join(SOURCE, f), join(m, f));
  return m;
}

/** Reads a safetensors file's header and data; `write` puts them back (the header re-encoded). */
export function safetensorsParts(path: string): { header: Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>; data: Uint8Array } {
  const b = readFileSync(path);
  const n = Number(new DataView(b.buffer, b.byteOffset).getBigUint64(0, true));
  return { header: JSON.parse(new TextDecoder().decode(b.subarray(8, 8 + n))), data: b.subarray(8 + n) };
}
export function writeSafetensors(path: string, header: unknown, data: Uint8Array): void {
  const h = new TextEncoder().encode(JSON.stringify(header));
  const len = new Uint8Array(8);
  new DataView(len.buffer).setBigUint64(0, BigInt(h.length), true);
  writeFileSync(path, new Uint8Array([...len, ...h, ...data]));
}

const pick = <T>(xs: readonly T[], rng: () => number): T => xs[Math.floor(rng() * xs.length) % xs.length];
const run = (m: string, ...more: string[]) => ["run", "--model", m, "--backend", "js", "--max-tokens", "2", ...more];
const st = (m: string) => join(m, "model.safetensors");
const editJson = (path: string, f: (j: Record<string, unknown>) => void) => {
  const j = JSON.parse(readFileSync(path, "utf8"));
  f(j);
  writeFileSync(path, JSON.stringify(j));
};

export const cases: FuzzCase[] = [
  {
    name: "hf/folder/no-config", cls: "13 HF folder missing config.json", exit: 1, message: /needs config\.json/,
    setup(dir) {
      const m = copyFixture(dir);
      rmSync(join(m, "config.json"));
      return run(m);
    },
  },
  {
    name: "hf/folder/no-weights", cls: "13 HF folder missing weights", exit: 1, message: /no model\.safetensors or model\.safetensors\.index\.json/,
    setup(dir) {
      const m = copyFixture(dir);
      rmSync(st(m));
      return run(m);
    },
  },
  {
    name: "hf/folder/no-tokenizer", cls: "13 HF folder missing tokenizer.json", exit: 1, message: /no tokenizer\.json/,
    setup(dir) {
      const m = copyFixture(dir);
      rmSync(join(m, "tokenizer.json"));
      return run(m);
    },
  },
  {
    name: "hf/safetensors/truncated", cls: "13 truncated safetensors", exit: 1,
    message: /model\.safetensors: tensor '[^']+' data_offsets at offset \d+: .*passes the end/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const b = readFileSync(st(m));
      const n = Number(new DataView(b.buffer, b.byteOffset).getBigUint64(0, true));
      // Cut somewhere inside the data section (the header stays whole).
      writeFileSync(st(m), b.subarray(0, 8 + n + Math.floor(rng() * (b.length - 8 - n - 1))));
      return run(m);
    },
  },
  {
    name: "hf/safetensors/truncated-header", cls: "13 truncated safetensors", exit: 1, message: /model\.safetensors: header length at offset 0: .*do not fit/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      writeFileSync(st(m), readFileSync(st(m)).subarray(0, 8 + Math.floor(rng() * 64)));
      return run(m);
    },
  },
  {
    name: "hf/safetensors/overlap", cls: "13 safetensors offsets overlap", exit: 1, message: /model\.safetensors: tensor '[^']+' data_offsets at offset \d+: overlaps tensor '/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const { header, data } = safetensorsParts(st(m));
      const names = Object.keys(header).filter((k) => k !== "__metadata__").sort((a, b) => header[a].data_offsets[0] - header[b].data_offsets[0]);
      const i = 1 + Math.floor(rng() * (names.length - 1)) % (names.length - 1);
      const t = header[names[i]], prev = header[names[i - 1]];
      const len = t.data_offsets[1] - t.data_offsets[0], shift = Math.max(2, Math.min(len, prev.data_offsets[1] - prev.data_offsets[0])) & ~1;
      t.data_offsets = [t.data_offsets[0] - shift, t.data_offsets[1] - shift];
      writeSafetensors(st(m), header, data);
      return run(m);
    },
  },
  {
    name: "hf/safetensors/past-end", cls: "13 safetensors offsets past the end", exit: 1, message: /data_offsets at offset \d+: \[\d+, \d+\) passes the end of the data section/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const { header, data } = safetensorsParts(st(m));
      const name = pick(Object.keys(header).filter((k) => k !== "__metadata__"), rng);
      const t = header[name], len = t.data_offsets[1] - t.data_offsets[0];
      t.data_offsets = [data.length - len + 2 + 2 * Math.floor(rng() * 100), data.length + 2 + 2 * Math.floor(rng() * 100)];
      t.data_offsets[1] = t.data_offsets[0] + len;
      writeSafetensors(st(m), header, data);
      return run(m);
    },
  },
  {
    name: "hf/safetensors/size-mismatch", cls: "13 safetensors offsets vs shape", exit: 1, message: /data_offsets at offset \d+: .* holds \d+ bytes but BF16\[/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const { header, data } = safetensorsParts(st(m));
      const name = pick(Object.keys(header).filter((k) => k !== "__metadata__"), rng);
      header[name].data_offsets[1] -= 2;
      writeSafetensors(st(m), header, data);
      return run(m);
    },
  },
  {
    name: "hf/safetensors/dtype", cls: "13 safetensors dtype it cannot read", exit: 1, message: /dtype at offset 8: dtype (I64|F8_E4M3|U8|F64|BOOL) cannot be read/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const { header, data } = safetensorsParts(st(m));
      header[pick(Object.keys(header).filter((k) => k !== "__metadata__"), rng)].dtype = pick(["I64", "F8_E4M3", "U8", "F64", "BOOL"], rng);
      writeSafetensors(st(m), header, data);
      return run(m);
    },
  },
  {
    name: "hf/safetensors/header-json", cls: "13 safetensors header", exit: 1, message: /model\.safetensors: header at offset 8: not valid JSON/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const b = readFileSync(st(m));
      b[8] = pick([0x78, 0x5d, 0x01, 0x22], rng); // the header's opening "{" becomes x, ], a control byte or a quote
      writeFileSync(st(m), b);
      return run(m);
    },
  },
  {
    name: "hf/shape/vs-config", cls: "12.1 shape vs config", exit: 1, message: /config\.json: tensor 'model\.layers\.\d+\.mlp\.\w+\.weight': shape \[\d+, \d+\], but the config implies \[\d+, \d+\]/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      editJson(join(m, "config.json"), (j) => (j.intermediate_size = 128 + 8 * (1 + Math.floor(rng() * 20))));
      return run(m);
    },
  },
  {
    name: "hf/shape/missing-tensor", cls: "12.1 tensor the family reads is missing", exit: 1, message: /tensor 'model\.layers\.\d+\.self_attn\.[qkv]_proj\.bias': missing/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const { header, data } = safetensorsParts(st(m));
      delete header[`model.layers.${Math.floor(rng() * 2)}.self_attn.${pick(["q", "k", "v"], rng)}_proj.bias`];
      writeSafetensors(st(m), header, data);
      return run(m);
    },
  },
  {
    name: "hf/config/unknown-architecture", cls: "13 unknown architecture", exit: 1, message: /unknown architecture '\w+' \(supported: .*LlamaForCausalLM/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      editJson(join(m, "config.json"), (j) => {
        j.architectures = [pick(["MambaForCausalLM", "GPTNeoXForCausalLM", "FooBar"], rng)];
        j.model_type = "unknown";
      });
      return run(m);
    },
  },
  {
    name: "hf/config/proto-name", cls: "12.10 registry lookups by own property", exit: 1, message: /unknown architecture '(constructor|__proto__|toString|hasOwnProperty)'/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      editJson(join(m, "config.json"), (j) => {
        j.architectures = [pick(["constructor", "__proto__", "toString", "hasOwnProperty"], rng)];
        delete j.model_type;
      });
      return run(m);
    },
  },
  {
    name: "hf/config/bad-field", cls: "13 config.json field", exit: 1, message: /config\.json: field '(hidden_size|num_hidden_layers|vocab_size|num_attention_heads)': /,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const field = pick(["hidden_size", "num_hidden_layers", "vocab_size", "num_attention_heads"], rng);
      editJson(join(m, "config.json"), (j) => (j[field] = pick(["64", -1, 0, 1.5, null], rng)));
      return run(m);
    },
  },
  {
    name: "hf/config/json", cls: "13 config.json syntax", exit: 1, message: /config\.json: top level: not valid JSON/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      const t = readFileSync(join(m, "config.json"), "utf8");
      writeFileSync(join(m, "config.json"), t.slice(0, Math.floor(rng() * (t.length - 2)) + 1));
      return run(m);
    },
  },
  {
    name: "hf/config/rope-type", cls: "13 config.json rope scaling", exit: 1, message: /config\.json: field 'rope_parameters': rope scaling type '(yarn|longrope|dynamic)' is not supported/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      editJson(join(m, "config.json"), (j) => (j.rope_parameters = { rope_type: pick(["yarn", "longrope", "dynamic"], rng), rope_theta: 10000, factor: 4 }));
      return run(m);
    },
  },
  {
    name: "hf/index/missing-shard", cls: "13 sharded index", exit: 1, message: /model-00002-of-00002\.safetensors: cannot read model file: no such file/,
    setup(dir) {
      const m = copyFixture(dir);
      const { header } = safetensorsParts(st(m));
      const weight_map: Record<string, string> = {};
      for (const k of Object.keys(header)) if (k !== "__metadata__") weight_map[k] = k.includes("layers.1") ? "model-00002-of-00002.safetensors" : "model.safetensors";
      writeFileSync(join(m, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map }));
      return run(m);
    },
  },
  {
    name: "hf/template/raises", cls: "13 template that fails to render", exit: 1, message: /chat template failed to render: .*only user turns/,
    setup(dir) {
      const m = copyFixture(dir);
      editJson(join(m, "tokenizer_config.json"), (j) => (j.chat_template = "{% for m in messages %}{% if m['role'] != 'user' %}{{ raise_exception('only user turns') }}{% endif %}{{ m['content'] }}{% endfor %}"));
      writeFileSync(join(dir, "m.json"), JSON.stringify([{ role: "system", content: "x" }, { role: "user", content: "hi" }]));
      return run(m, "--messages", join(dir, "m.json"));
    },
  },
  {
    name: "hf/template/syntax", cls: "13 template that fails to render", exit: 1, message: /chat template does not parse/,
    setup(dir, rng) {
      const m = copyFixture(dir);
      editJson(join(m, "tokenizer_config.json"), (j) => (j.chat_template = pick(["{% for m in messages %}{{ m.content }}", "{{ messages[0]['content'] ", "{% if %}x{% endif %}"], rng)));
      writeFileSync(join(dir, "m.json"), JSON.stringify([{ role: "user", content: "hi" }]));
      return run(m, "--messages", join(dir, "m.json"));
    },
  },
  {
    name: "hf/messages/bad", cls: "13 --messages file", exit: 1, message: /m\.json: (field '0\.(role|content)'|top level): /,
    setup(dir, rng) {
      const m = copyFixture(dir);
      writeFileSync(join(dir, "m.json"), pick(['[{"content":"hi"}]', '[{"role":"user","content":5}]', '[]', '{"role":"user"}', '[{"role":"user","content":"hi"'], rng));
      return run(m, "--messages", join(dir, "m.json"));
    },
  },
];
