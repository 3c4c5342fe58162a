// A model file read on demand: the header is read first, tensors one at a time by offset, so loading never
// holds the whole file in the JS heap. Only regular files are opened (a FIFO or a device would block or
// never end). Formats (gguf, safetensors) parse their headers through `readAt` and hand tensors to
// `fileStore`, a WeightStore whose `bytes(name)` reads that tensor from the file when asked.
import { closeSync, fstatSync, openSync, readSync, statSync } from "node:fs";
import type { TensorEntry, TensorInfo, WeightStore } from "../../graph/weights.ts";
import { ModelFormatError, ModelNotFoundError } from "../errors.ts";

export interface ModelFile {
  readonly path: string;
  readonly size: number;
  /** `length` bytes from `offset`; a read past the end is a ModelFormatError naming `what`. */
  readAt(offset: number, length: number, what: string): Uint8Array;
  close(): void;
}

/** Opens a regular file for reading (missing, a directory or not a regular file: ModelNotFoundError). */
export function openModelFile(path: string): ModelFile {
  let st;
  try {
    st = statSync(path);
  } catch (e) {
    throw new ModelNotFoundError(path, fsReason(e), { cause: e });
  }
  if (st.isDirectory()) throw new ModelNotFoundError(path, "is a directory");
  if (!st.isFile()) throw new ModelNotFoundError(path, "is not a regular file");
  let fd: number;
  try {
    fd = openSync(path, "r");
  } catch (e) {
    throw new ModelNotFoundError(path, fsReason(e), { cause: e });
  }
  const size = fstatSync(fd).size;
  let open = true;
  return {
    path,
    size,
    readAt(offset, length, what) {
      if (!open) throw new ModelFormatError({ file: path, field: what, offset }, "the file was already closed");
      if (!(offset >= 0 && length >= 0 && offset + length <= size)) {
        throw new ModelFormatError({ file: path, field: what, offset }, `${length} bytes pass the end of the ${size}-byte file`);
      }
      const out = new Uint8Array(length);
      let got = 0;
      while (got < length) {
        const n = readSync(fd, out, got, length - got, offset + got);
        if (n <= 0) throw new ModelFormatError({ file: path, field: what, offset: offset + got }, "the file ended early (it shrank while being read)");
        got += n;
      }
      return out;
    },
    close() {
      if (open) closeSync(fd);
      open = false;
    },
  };
}

/**
 * A WeightStore over tensors at absolute offsets of `file`: `bytes(name)` reads that tensor (a fresh buffer
 * the caller may keep), so a loader that uploads one tensor at a time holds one tensor at a time.
 */
export function fileStore(file: ModelFile, entries: readonly TensorEntry[]): WeightStore {
  const byName = new Map<string, TensorEntry>();
  for (const e of entries) {
    if (byName.has(e.name)) throw new ModelFormatError({ file: file.path, field: `tensor ${e.name}`, offset: e.offset }, "listed twice");
    if (!(e.offset >= 0 && e.offset + e.byteLength <= file.size)) {
      throw new ModelFormatError({ file: file.path, field: `tensor ${e.name} data`, offset: e.offset }, `${e.byteLength} bytes pass the end of the ${file.size}-byte file`);
    }
    byName.set(e.name, e);
  }
  const info = ({ offset: _, ...i }: TensorEntry): TensorInfo => i;
  return {
    tensors: () => [...byName.values()].map(info),
    info: (name) => {
      const e = byName.get(name);
      return e && info(e);
    },
    bytes(name) {
      const e = byName.get(name);
      if (!e) throw new RangeError(`no tensor ${name}`);
      return file.readAt(e.offset, e.byteLength, `tensor ${e.name}`);
    },
  };
}

/** Why a path cannot be read, in a few words; anything else (Deno's missing --allow-read) in its own words. */
function fsReason(e: unknown): string {
  const code = (e as { code?: string })?.code;
  if (code === "ENOENT" || code === "ENOTDIR") return "no such file";
  if (code === "EACCES" || code === "EPERM") return "permission denied";
  return e instanceof Error ? e.message.split("\n")[0] : String(e);
}
