// libamd_comgr (the code object manager): data objects, data sets, action info, actions (assemble, compile,
// link, disassemble). This is how the ROCm backend turns AMDGPU assembly or LLVM IR into a code object that
// hsa_code_object_reader_create_from_memory loads. Handles (amd_comgr_data_t ...) are u64 by value.

import { type Bound, cstr, cstringFrom, defineSymbols, dlopen, type Library, pinLibrary, ptrArray, readCString } from "./lib.ts";

const H = "u64" as const;
const B = "buffer" as const;
const S = "u32" as const; // amd_comgr_status_t

export const comgrSymbols = defineSymbols({
  amd_comgr_get_version: { args: [B, B], result: "void" },
  amd_comgr_status_string: { args: [S, B], result: S },
  amd_comgr_get_isa_count: { args: [B], result: S },
  amd_comgr_get_isa_name: { args: ["usize", B], result: S },
  amd_comgr_create_data: { args: ["u32", B], result: S },
  amd_comgr_release_data: { args: [H], result: S },
  amd_comgr_get_data_kind: { args: [H, B], result: S },
  amd_comgr_set_data: { args: [H, "usize", B], result: S },
  amd_comgr_set_data_name: { args: [H, B], result: S },
  amd_comgr_get_data: { args: [H, B, B], result: S },
  amd_comgr_get_data_name: { args: [H, B, B], result: S },
  amd_comgr_get_data_isa_name: { args: [H, B, B], result: S },
  amd_comgr_create_data_set: { args: [B], result: S },
  amd_comgr_destroy_data_set: { args: [H], result: S },
  amd_comgr_data_set_add: { args: [H, H], result: S },
  amd_comgr_data_set_remove: { args: [H, "u32"], result: S },
  amd_comgr_action_data_count: { args: [H, "u32", B], result: S },
  amd_comgr_action_data_get_data: { args: [H, "u32", "usize", B], result: S },
  amd_comgr_create_action_info: { args: [B], result: S },
  amd_comgr_destroy_action_info: { args: [H], result: S },
  amd_comgr_action_info_set_isa_name: { args: [H, B], result: S },
  amd_comgr_action_info_set_language: { args: [H, "u32"], result: S },
  amd_comgr_action_info_set_option_list: { args: [H, B, "usize"], result: S },
  amd_comgr_action_info_set_logging: { args: [H, "u8"], result: S },
  amd_comgr_do_action: { args: ["u32", H, H, H], result: S },
  amd_comgr_get_data_metadata: { args: [H, B], result: S },
  amd_comgr_destroy_metadata: { args: [H], result: S },
  amd_comgr_get_metadata_kind: { args: [H, B], result: S },
  amd_comgr_get_metadata_string: { args: [H, B, B], result: S },
  amd_comgr_get_metadata_list_size: { args: [H, B], result: S },
  amd_comgr_index_list_metadata: { args: [H, "usize", B], result: S },
  amd_comgr_metadata_lookup: { args: [H, B, B], result: S },
});
export type ComgrSymbols = Bound<typeof comgrSymbols>;

export const COMGR_LIBRARY: readonly string[] = ["libamd_comgr.so.2", "libamd_comgr.so.3", "libamd_comgr.so"];

export const AMD_COMGR_STATUS_SUCCESS = 0;
export const AMD_COMGR_DATA_KIND_SOURCE = 1;
export const AMD_COMGR_DATA_KIND_INCLUDE = 2;
export const AMD_COMGR_DATA_KIND_DIAGNOSTIC = 4;
export const AMD_COMGR_DATA_KIND_LOG = 5;
export const AMD_COMGR_DATA_KIND_BC = 6;
export const AMD_COMGR_DATA_KIND_RELOCATABLE = 7;
export const AMD_COMGR_DATA_KIND_EXECUTABLE = 8;
export const AMD_COMGR_DATA_KIND_BYTES = 9;
export const AMD_COMGR_LANGUAGE_NONE = 0;
export const AMD_COMGR_LANGUAGE_OPENCL_1_2 = 1;
export const AMD_COMGR_LANGUAGE_OPENCL_2_0 = 2;
export const AMD_COMGR_LANGUAGE_HIP = 4;
export const AMD_COMGR_ACTION_SOURCE_TO_PREPROCESSOR = 0;
export const AMD_COMGR_ACTION_COMPILE_SOURCE_TO_BC = 2;
export const AMD_COMGR_ACTION_LINK_BC_TO_BC = 4;
export const AMD_COMGR_ACTION_OPTIMIZE_BC_TO_BC = 5;
export const AMD_COMGR_ACTION_CODEGEN_BC_TO_RELOCATABLE = 6;
export const AMD_COMGR_ACTION_CODEGEN_BC_TO_ASSEMBLY = 7;
export const AMD_COMGR_ACTION_LINK_RELOCATABLE_TO_RELOCATABLE = 8;
export const AMD_COMGR_ACTION_LINK_RELOCATABLE_TO_EXECUTABLE = 9;
export const AMD_COMGR_ACTION_ASSEMBLE_SOURCE_TO_RELOCATABLE = 10;
export const AMD_COMGR_ACTION_DISASSEMBLE_RELOCATABLE_TO_SOURCE = 11;
export const AMD_COMGR_ACTION_DISASSEMBLE_EXECUTABLE_TO_SOURCE = 12;
export const AMD_COMGR_ACTION_COMPILE_SOURCE_WITH_DEVICE_LIBS_TO_BC = 15;

export const AMD_COMGR_METADATA_KIND_NULL = 0;
export const AMD_COMGR_METADATA_KIND_STRING = 1;
export const AMD_COMGR_METADATA_KIND_MAP = 2;
export const AMD_COMGR_METADATA_KIND_LIST = 3;

/** A code object's metadata as plain data: strings (numbers stay strings, as comgr gives them), lists, maps. */
export type MetadataValue = string | null | MetadataValue[] | { [key: string]: MetadataValue };

export const COMGR_STATUS_NAMES: Readonly<Record<number, string>> = {
  0: "AMD_COMGR_STATUS_SUCCESS",
  1: "AMD_COMGR_STATUS_ERROR",
  2: "AMD_COMGR_STATUS_ERROR_INVALID_ARGUMENT",
  3: "AMD_COMGR_STATUS_ERROR_OUT_OF_RESOURCES",
};

/** A comgr call failed; `log` carries the action's log when one was produced. */
export class ComgrError extends Error {
  override name = "ComgrError";
  readonly codeName: string;
  constructor(readonly fn: string, readonly code: number, readonly log = "") {
    const codeName = COMGR_STATUS_NAMES[code] ?? `amd_comgr_status_t(${code})`;
    super(`${fn} failed: ${codeName} (${code})${log ? `\n${log}` : ""}`);
    this.codeName = codeName;
  }
}

/** Opens libamd_comgr, pinned for the life of the process (its LLVM options cannot be registered twice). */
export function openComgr(names: string | readonly string[] = COMGR_LIBRARY): Comgr {
  const lib = dlopen(names, comgrSymbols);
  pinLibrary(lib.path);
  return new Comgr(lib);
}

/** libamd_comgr's functions (`fn`, raw) and thin checked wrappers. */
export class Comgr {
  readonly fn: ComgrSymbols;
  readonly #u64 = new BigUint64Array(new ArrayBuffer(8));
  readonly #u32 = new Uint32Array(new ArrayBuffer(4));

  constructor(readonly lib: Library<typeof comgrSymbols>) {
    this.fn = lib.symbols;
  }
  close(): void {
    this.lib.close();
  }
  check(fn: string, code: number, log = ""): void {
    if (code !== AMD_COMGR_STATUS_SUCCESS) throw new ComgrError(fn, code, log);
  }
  /** [major, minor] of the interface (2.4 for ROCm 5.2's comgr). */
  version(): [number, number] {
    const out = new BigUint64Array(2);
    this.fn.amd_comgr_get_version(out.subarray(0, 1), out.subarray(1, 2));
    return [Number(out[0]), Number(out[1])];
  }
  statusString(code: number): string {
    const out = new BigUint64Array(1);
    if (this.fn.amd_comgr_status_string(code, out) === 0 && out[0] !== 0n) return readCString(out[0]);
    return COMGR_STATUS_NAMES[code] ?? `amd_comgr_status_t(${code})`;
  }
  /** Every ISA name the library can target ("amdgcn-amd-amdhsa--gfx90a" ...). */
  isaNames(): string[] {
    this.check("amd_comgr_get_isa_count", this.fn.amd_comgr_get_isa_count(this.#u64));
    const out: string[] = [];
    const name = new BigUint64Array(1);
    for (let i = 0n; i < this.#u64[0]; i++) {
      this.check("amd_comgr_get_isa_name", this.fn.amd_comgr_get_isa_name(i, name));
      out.push(readCString(name[0]));
    }
    return out;
  }

  // --- data objects --------------------------------------------------------------------------------------
  createData(kind: number, content?: Uint8Array | string, name?: string): bigint {
    this.check("amd_comgr_create_data", this.fn.amd_comgr_create_data(kind, this.#u64));
    const data = this.#u64[0];
    if (content !== undefined) this.setData(data, content);
    if (name !== undefined) this.setDataName(data, name);
    return data;
  }
  releaseData(data: bigint): void {
    this.check("amd_comgr_release_data", this.fn.amd_comgr_release_data(data));
  }
  dataKind(data: bigint): number {
    this.check("amd_comgr_get_data_kind", this.fn.amd_comgr_get_data_kind(data, this.#u32));
    return this.#u32[0];
  }
  /** Copies `content` into the data object (strings as UTF-8, without a NUL). */
  setData(data: bigint, content: Uint8Array | string): void {
    const bytes = typeof content === "string" ? new TextEncoder().encode(content) : content;
    this.check("amd_comgr_set_data", this.fn.amd_comgr_set_data(data, bytes.byteLength, bytes));
  }
  setDataName(data: bigint, name: string): void {
    this.check("amd_comgr_set_data_name", this.fn.amd_comgr_set_data_name(data, cstr(name)));
  }
  getData(data: bigint): Uint8Array {
    const size = new BigUint64Array(1);
    this.check("amd_comgr_get_data", this.fn.amd_comgr_get_data(data, size, null));
    const out = new Uint8Array(Number(size[0]));
    if (out.length) this.check("amd_comgr_get_data", this.fn.amd_comgr_get_data(data, size, out));
    return out;
  }
  getDataName(data: bigint): string {
    return this.#sizedString("amd_comgr_get_data_name", (size, out) => this.fn.amd_comgr_get_data_name(data, size, out));
  }
  /** The ISA a relocatable/executable was built for. */
  getDataIsaName(data: bigint): string {
    return this.#sizedString("amd_comgr_get_data_isa_name", (size, out) => this.fn.amd_comgr_get_data_isa_name(data, size, out));
  }
  #sizedString(fn: string, call: (size: BigUint64Array, out: Uint8Array | null) => number): string {
    const size = new BigUint64Array(1);
    this.check(fn, call(size, null));
    const out = new Uint8Array(Number(size[0]) + 1);
    this.check(fn, call(size, out));
    return cstringFrom(out);
  }

  // --- data sets and actions -----------------------------------------------------------------------------
  createDataSet(): bigint {
    this.check("amd_comgr_create_data_set", this.fn.amd_comgr_create_data_set(this.#u64));
    return this.#u64[0];
  }
  destroyDataSet(set: bigint): void {
    this.check("amd_comgr_destroy_data_set", this.fn.amd_comgr_destroy_data_set(set));
  }
  dataSetAdd(set: bigint, data: bigint): void {
    this.check("amd_comgr_data_set_add", this.fn.amd_comgr_data_set_add(set, data));
  }
  dataSetRemove(set: bigint, kind: number): void {
    this.check("amd_comgr_data_set_remove", this.fn.amd_comgr_data_set_remove(set, kind));
  }
  actionDataCount(set: bigint, kind: number): number {
    this.check("amd_comgr_action_data_count", this.fn.amd_comgr_action_data_count(set, kind, this.#u64));
    return Number(this.#u64[0]);
  }
  /** The index-th data object of `kind` in `set`; release it with releaseData. */
  actionDataGet(set: bigint, kind: number, index: number): bigint {
    this.check("amd_comgr_action_data_get_data", this.fn.amd_comgr_action_data_get_data(set, kind, index, this.#u64));
    return this.#u64[0];
  }
  createActionInfo(o: { isa?: string; language?: number; options?: readonly string[]; logging?: boolean } = {}): bigint {
    this.check("amd_comgr_create_action_info", this.fn.amd_comgr_create_action_info(this.#u64));
    const info = this.#u64[0];
    if (o.isa !== undefined) this.check("amd_comgr_action_info_set_isa_name", this.fn.amd_comgr_action_info_set_isa_name(info, cstr(o.isa)));
    if (o.language !== undefined) this.check("amd_comgr_action_info_set_language", this.fn.amd_comgr_action_info_set_language(info, o.language));
    if (o.options?.length) {
      this.check("amd_comgr_action_info_set_option_list", this.fn.amd_comgr_action_info_set_option_list(info, ptrArray(o.options), o.options.length));
    }
    if (o.logging !== undefined) this.check("amd_comgr_action_info_set_logging", this.fn.amd_comgr_action_info_set_logging(info, o.logging ? 1 : 0));
    return info;
  }
  destroyActionInfo(info: bigint): void {
    this.check("amd_comgr_destroy_action_info", this.fn.amd_comgr_destroy_action_info(info));
  }
  /** Runs an action; on failure the ComgrError carries the LOG data objects of `output` (enable logging). */
  doAction(kind: number, info: bigint, input: bigint, output: bigint): void {
    const r = this.fn.amd_comgr_do_action(kind, info, input, output);
    if (r !== AMD_COMGR_STATUS_SUCCESS) throw new ComgrError("amd_comgr_do_action", r, this.logs(output));
  }
  /** Text of every LOG data object in a set. */
  logs(set: bigint): string {
    let text = "";
    const n = this.actionDataCount(set, AMD_COMGR_DATA_KIND_LOG);
    for (let i = 0; i < n; i++) {
      const d = this.actionDataGet(set, AMD_COMGR_DATA_KIND_LOG, i);
      text += new TextDecoder().decode(this.getData(d));
      this.releaseData(d);
    }
    return text;
  }

  // --- metadata -------------------------------------------------------------------------------------------
  /**
   * The entries `keys` of a relocatable/executable's metadata map (the "amdhsa." note), each read recursively
   * into plain data. Maps are read only at the keys `want(path)` names (comgr's map iteration needs a
   * callback; lookups do not), so the caller says which keys it reads; a missing key is absent.
   */
  dataMetadata(data: bigint, want: (path: string) => readonly string[]): MetadataValue {
    this.check("amd_comgr_get_data_metadata", this.fn.amd_comgr_get_data_metadata(data, this.#u64));
    const root = this.#u64[0];
    try {
      return this.#readNode(root, "", want);
    } finally {
      this.fn.amd_comgr_destroy_metadata(root);
    }
  }
  #readNode(node: bigint, path: string, want: (path: string) => readonly string[]): MetadataValue {
    const k = new Uint32Array(1);
    this.check("amd_comgr_get_metadata_kind", this.fn.amd_comgr_get_metadata_kind(node, k));
    const size = new BigUint64Array(1);
    const child = new BigUint64Array(1);
    const sub = (c: bigint, p: string): MetadataValue => {
      try {
        return this.#readNode(c, p, want);
      } finally {
        this.fn.amd_comgr_destroy_metadata(c);
      }
    };
    switch (k[0]) {
      case AMD_COMGR_METADATA_KIND_STRING:
        return this.#sizedString("amd_comgr_get_metadata_string", (sz, out) => this.fn.amd_comgr_get_metadata_string(node, sz, out));
      case AMD_COMGR_METADATA_KIND_LIST: {
        this.check("amd_comgr_get_metadata_list_size", this.fn.amd_comgr_get_metadata_list_size(node, size));
        const out: MetadataValue[] = [];
        for (let i = 0n; i < size[0]; i++) {
          this.check("amd_comgr_index_list_metadata", this.fn.amd_comgr_index_list_metadata(node, i, child));
          out.push(sub(child[0], `${path}[]`));
        }
        return out;
      }
      case AMD_COMGR_METADATA_KIND_MAP: {
        const out: { [key: string]: MetadataValue } = {};
        for (const key of want(path)) {
          if (this.fn.amd_comgr_metadata_lookup(node, cstr(key), child) !== AMD_COMGR_STATUS_SUCCESS) continue;
          out[key] = sub(child[0], path ? `${path}/${key}` : key);
        }
        return out;
      }
      default:
        return null;
    }
  }

  /**
   * LLVM IR (text or bitcode) -> relocatable -> executable code object for `isa`; `options` go to the
   * compiler (e.g. "-O3", "-mcpu=gfx1100" where the library's ISA table predates the target). Returns the
   * ELF and the executable's data handle's metadata through `read` before everything is released.
   */
  compileIr<T>(ir: string, isa: string, options: readonly string[], read: (exe: bigint) => T): { elf: Uint8Array; out: T } {
    return this.#toExecutable(AMD_COMGR_DATA_KIND_BC, AMD_COMGR_ACTION_CODEGEN_BC_TO_RELOCATABLE, ir, "kernel.ll", isa, options, read);
  }

  /** Runs one action on one input object of `kind` and returns the text of the first `outKind` output. */
  actionText(action: number, kind: number, input: Uint8Array | string, outKind: number, isa: string, options: readonly string[] = []): string {
    const info = this.createActionInfo({ isa, options, logging: true });
    const src = this.createDataSet();
    const out = this.createDataSet();
    const data = this.createData(kind, input, kind === AMD_COMGR_DATA_KIND_BC ? "kernel.ll" : "kernel.co");
    try {
      this.dataSetAdd(src, data);
      this.doAction(action, info, src, out);
      const d = this.actionDataGet(out, outKind, 0);
      try {
        return new TextDecoder().decode(this.getData(d));
      } finally {
        this.releaseData(d);
      }
    } finally {
      this.releaseData(data);
      this.destroyDataSet(src);
      this.destroyDataSet(out);
      this.destroyActionInfo(info);
    }
  }

  /**
   * AMDGPU assembly -> relocatable -> executable code object (ELF) for `isa` ("amdgcn-amd-amdhsa--gfx90a").
   * Everything it creates is released, also on failure.
   */
  assembleExecutable(source: string, isa: string, options: readonly string[] = []): Uint8Array {
    return this.#toExecutable(AMD_COMGR_DATA_KIND_SOURCE, AMD_COMGR_ACTION_ASSEMBLE_SOURCE_TO_RELOCATABLE, source, "kernel.s", isa, options, () => 0).elf;
  }

  /** One input of `kind` -> relocatable (by `toReloc`) -> linked executable; `read` sees the executable's handle. */
  #toExecutable<T>(kind: number, toReloc: number, input: string, name: string, isa: string, options: readonly string[], read: (exe: bigint) => T): { elf: Uint8Array; out: T } {
    const info = this.createActionInfo({ isa, options, logging: true });
    const src = this.createDataSet();
    const reloc = this.createDataSet();
    const exe = this.createDataSet();
    const data = this.createData(kind, input, name);
    try {
      this.dataSetAdd(src, data);
      this.doAction(toReloc, info, src, reloc);
      this.doAction(AMD_COMGR_ACTION_LINK_RELOCATABLE_TO_EXECUTABLE, info, reloc, exe);
      const d = this.actionDataGet(exe, AMD_COMGR_DATA_KIND_EXECUTABLE, 0);
      try {
        return { elf: this.getData(d), out: read(d) };
      } finally {
        this.releaseData(d);
      }
    } finally {
      this.releaseData(data);
      this.destroyDataSet(src);
      this.destroyDataSet(reloc);
      this.destroyDataSet(exe);
      this.destroyActionInfo(info);
    }
  }
}
