// Safetensors checkpoints, single-file or sharded (model.safetensors.index.json), read on demand through
// llm/formats/file.ts: each file's header is read and validated first; a tensor's bytes are read only when the
// loader asks for them, so loading holds one tensor at a time.
//
// Layout: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]},
// "__metadata__"?: {...}}, then the data section; offsets are relative to the data section's start.
// Checked: N within the file, the JSON's shape (zod), a dtype we read (F32, F16, BF16), end - begin equal to
// the shape's bytes, every range inside the file, and no two ranges overlapping.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import type { DType } from "../../graph/dtype.ts";
import type { TensorEntry, TensorInfo, WeightStore } from "../../graph/weights.ts";
import { ConfigError, ModelFormatError, ModelNotFoundError, UnsupportedFormatError } from "../errors.ts";
import { fileStore, type ModelFile, openModelFile } from "./file.ts";

const DTYPES: Record<string, { dtype: DType; size: number }> = {
  F32: { dtype: "f32", size: 4 },
  F16: { dtype: "f16", size: 2 },
  BF16: { dtype: "bf16", size: 2 },
};
/** A header larger than this is not a model's (a few hundred bytes per tensor). */
const MAX_HEADER = 100 * 1024 * 1024;

const Entry = z.object({
  dtype: z.string(),
  shape: z.array(z.number().int().nonnegative()).max(8),
  data_offsets: z.tuple([z.number().int().nonnegative(), z.number().int().nonnegative()]),
});

/** The tensors of one safetensors file, with absolute offsets (nothing is read past the header). */
export function readSafetensorsHeader(file: ModelFile): TensorEntry[] {
  const loc = (field: string, offset = 0) => ({ file: file.path, field, offset });
  if (file.size < 8) throw new ModelFormatError(loc("header length"), `the file has ${file.size} bytes, fewer than the 8 of the header length`);
  const len = new DataView(file.readAt(0, 8, "header length").buffer).getBigUint64(0, true);
  if (len > BigInt(Math.min(MAX_HEADER, file.size - 8))) {
    throw new ModelFormatError(loc("header length"), `${len} bytes of header do not fit in the ${file.size}-byte file`);
  }
  const n = Number(len);
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(file.readAt(8, n, "header")));
  } catch (e) {
    throw new ModelFormatError(loc("header", 8), `not valid JSON (${(e as Error).message})`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) throw new ModelFormatError(loc("header", 8), "not a JSON object");
  const base = 8 + n;
  const entries: TensorEntry[] = [];
  for (const [name, raw] of Object.entries(json)) {
    if (name === "__metadata__") continue;
    const r = Entry.safeParse(raw);
    if (!r.success) {
      const i = r.error.issues[0];
      throw new ModelFormatError(loc(`tensor '${name}' ${i.path.join(".") || "entry"}`, 8), i.message);
    }
    const { dtype, shape, data_offsets: [begin, end] } = r.data;
    const t = DTYPES[dtype];
    if (!Object.hasOwn(DTYPES, dtype) || !t) throw new UnsupportedFormatError(loc(`tensor '${name}' dtype`, 8), `dtype ${dtype} cannot be read (F32, F16 and BF16 can)`);
    const bytes = shape.reduce((a, d) => a * d, 1) * t.size;
    if (end < begin || end - begin !== bytes) {
      throw new ModelFormatError(loc(`tensor '${name}' data_offsets`, 8), `[${begin}, ${end}) holds ${end - begin} bytes but ${dtype}[${shape}] needs ${bytes}`);
    }
    if (base + end > file.size) {
      throw new ModelFormatError(loc(`tensor '${name}' data_offsets`, base + begin), `[${begin}, ${end}) passes the end of the data section (${file.size - base} bytes)`);
    }
    entries.push({ name, dtype: t.dtype, shape, byteLength: bytes, offset: base + begin });
  }
  const sorted = [...entries].sort((a, b) => a.offset - b.offset);
  for (let i = 1; i < sorted.length; i++) {
    const a = sorted[i - 1], b = sorted[i];
    if (b.offset < a.offset + a.byteLength && b.byteLength > 0 && a.byteLength > 0) {
      throw new ModelFormatError(loc(`tensor '${b.name}' data_offsets`, b.offset), `overlaps tensor '${a.name}'`);
    }
  }
  return entries;
}

/** A WeightStore over one or more safetensors files; `close` releases them. */
export interface SafetensorsStore extends WeightStore {
  readonly files: readonly string[];
  close(): void;
}

const Index = z.object({ weight_map: z.record(z.string(), z.string()) }).loose();

/**
 * Opens the weights of a Hugging Face folder: `model.safetensors.index.json` and its shards when present, else
 * `model.safetensors`. Missing files are a ModelNotFoundError; a tensor the index places in a shard that lacks
 * it is a ConfigError naming the index.
 */
export function openSafetensorsFolder(dir: string): SafetensorsStore {
  const index = join(dir, "model.safetensors.index.json");
  if (existsSync(index)) {
    let json: unknown;
    try {
      json = JSON.parse(openText(index));
    } catch (e) {
      if (e instanceof ModelNotFoundError) throw e;
      throw new ConfigError(index, "", `not valid JSON (${(e as Error).message})`);
    }
    const r = Index.safeParse(json);
    if (!r.success) throw new ConfigError(index, r.error.issues[0].path.join("."), r.error.issues[0].message);
    const shards = [...new Set(Object.values(r.data.weight_map))];
    for (const s of shards) {
      if (s.includes("/") || s.includes("\\") || s === ".." || s === ".") throw new ConfigError(index, "weight_map", `shard '${s}' is not a file name in the folder`);
    }
    const store = openSafetensors(shards.map((s) => join(dir, s)));
    for (const [name, shard] of Object.entries(r.data.weight_map)) {
      if (store.fileOf(name) !== join(dir, shard)) throw new ConfigError(index, `weight_map.${name}`, `tensor is not in ${shard}`);
    }
    return store;
  }
  const single = join(dir, "model.safetensors");
  if (!existsSync(single)) throw new ModelNotFoundError(dir, "no model.safetensors or model.safetensors.index.json in the folder");
  return openSafetensors([single]);
}

/** Opens safetensors files as one store (a tensor name in two files is an error). */
export function openSafetensors(paths: readonly string[]): SafetensorsStore & { fileOf(name: string): string | undefined } {
  const opened: ModelFile[] = [];
  const byName = new Map<string, { store: WeightStore; file: string }>();
  try {
    for (const p of paths) {
      const f = openModelFile(p);
      opened.push(f);
      const entries = readSafetensorsHeader(f);
      const store = fileStore(f, entries);
      for (const e of entries) {
        const prev = byName.get(e.name);
        if (prev) throw new ModelFormatError({ file: p, field: `tensor '${e.name}'`, offset: 8 }, `also in ${prev.file}`);
        byName.set(e.name, { store, file: p });
      }
    }
  } catch (e) {
    for (const f of opened) f.close();
    throw e;
  }
  return {
    files: [...paths],
    tensors: () => [...byName.entries()].map(([n, s]) => s.store.info(n) as TensorInfo),
    info: (name) => byName.get(name)?.store.info(name),
    bytes(name) {
      const s = byName.get(name);
      if (!s) throw new RangeError(`no tensor ${name}`);
      return s.store.bytes(name);
    },
    fileOf: (name) => byName.get(name)?.file,
    close() {
      for (const f of opened) f.close();
    },
  };
}

/** A small text file of a model folder (config, tokenizer, template), read whole. */
export function openText(path: string): string {
  const f = openModelFile(path);
  try {
    if (f.size > 256 * 1024 * 1024) throw new ModelFormatError({ file: path, field: "size", offset: 0 }, `${f.size} bytes is too large for a JSON or template file`);
    return new TextDecoder("utf-8").decode(f.readAt(0, f.size, "contents"));
  } finally {
    f.close();
  }
}
