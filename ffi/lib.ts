// The one place that knows Deno.dlopen from bun:ffi. A library is declared once as plain data (symbol name ->
// {args, result} over a small type vocabulary) and bound under whichever runtime is running.
//
// Conventions that hold in both runtimes:
// - "pointer" and "function" values are native addresses as bigint (0n is NULL); number is accepted on input.
//   They travel as u64 at the ABI (identical to a pointer on x86-64 and aarch64), which keeps calls cheap:
//   no per-call pointer object on Deno, no Number conversion on Bun.
// - "buffer" is a JS typed array (or null) whose data pointer is passed for the duration of the call.
// - 64-bit results ("u64", "i64", "usize", "pointer", "function") always come back as bigint.
// - The bound functions are the runtime's raw FFI functions: no wrapper closure sits on the hot path.

import { readFileSync } from "node:fs";

/** The type vocabulary of symbol tables (and of callbacks). */
export type NativeType =
  | "u8"
  | "i8"
  | "u16"
  | "i16"
  | "u32"
  | "i32"
  | "u64"
  | "i64"
  | "usize"
  | "f32"
  | "f64"
  | "pointer"
  | "buffer"
  | "function"
  | "void";

/** A native address; 0n is NULL. */
export type Pointer = bigint;

type Wide = "u64" | "i64" | "usize" | "pointer" | "function";

/** What JS passes for an argument of native type T. */
export type ArgValue<T extends NativeType> = T extends Wide ? bigint | number
  : T extends "buffer" ? ArrayBufferView | null
  : T extends "void" ? never
  : number;
/** What JS gets back for a result of native type T. */
export type ResultValue<T extends NativeType> = T extends "void" ? void
  : T extends Wide | "buffer" ? bigint
  : number;

/** A C function signature. */
export interface FnDef {
  readonly args: readonly NativeType[];
  readonly result: NativeType;
}
/** A symbol of a library: its signature, whether it may be absent, and its native name if the key differs. */
export interface SymbolDef extends FnDef {
  /** When true a missing symbol binds to null instead of failing the load (newer entry points). */
  readonly optional?: boolean;
  /** The exported name when the table key is an alias (one native symbol bound with two signatures). */
  readonly name?: string;
}
export type SymbolTable = { readonly [name: string]: SymbolDef };

export type ArgsOf<A extends readonly NativeType[]> = { -readonly [K in keyof A]: ArgValue<A[K]> };
/** The JS type of a bound native function. */
export type NativeFn<D extends FnDef> = (...args: ArgsOf<D["args"]>) => ResultValue<D["result"]>;
/** The bound symbols of a table: optional ones may be null. */
export type Bound<S extends SymbolTable> = {
  readonly [K in keyof S]: S[K] extends { readonly optional: true } ? NativeFn<S[K]> | null : NativeFn<S[K]>;
};

export interface Library<S extends SymbolTable> {
  /** The name that opened (the first of the candidates that loaded). */
  readonly path: string;
  readonly symbols: Bound<S>;
  /** Unloads the library; its functions must not be called afterwards. */
  close(): void;
}

/** Declares a symbol table with its literal types kept (no `as const` needed at the call site). */
export function defineSymbols<const S extends SymbolTable>(symbols: S): S {
  return symbols;
}

/** No candidate name of a library could be opened. */
export class LibraryNotFound extends Error {
  override name = "LibraryNotFound";
  constructor(readonly library: string, readonly tried: readonly string[], readonly detail: string) {
    super(`library ${library} not found (tried ${tried.join(", ")}): ${detail}`);
  }
}
/** A library opened but lacks a required symbol. */
export class SymbolNotFound extends Error {
  override name = "SymbolNotFound";
  constructor(readonly library: string, readonly symbol: string) {
    super(`symbol ${symbol} not found in ${library}`);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Runtime detection and the minimal shape of bun:ffi we use (typed here so `deno check` never sees bun:ffi).

interface BunFfiFn {
  args?: string[];
  returns?: string;
  ptr?: number | bigint;
  threadsafe?: boolean;
}
interface BunLib {
  symbols: Record<string, (...a: unknown[]) => unknown>;
  close(): void;
}
interface BunFfi {
  dlopen(path: string, symbols: Record<string, BunFfiFn>): BunLib;
  linkSymbols(symbols: Record<string, BunFfiFn>): BunLib;
  CFunction(def: BunFfiFn & { ptr: number | bigint }): (...a: unknown[]) => unknown;
  JSCallback: new (fn: (...a: never[]) => unknown, def: BunFfiFn) => { ptr: number | null; close(): void };
  ptr(view: ArrayBufferView | ArrayBuffer, byteOffset?: number): number;
  toArrayBuffer(ptr: number | bigint, byteOffset?: number, byteLength?: number): ArrayBuffer;
  CString: new (ptr: number | bigint, byteOffset?: number, byteLength?: number) => string;
  read: Record<"u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "f64", (p: number | bigint, o?: number) => number> & {
    u64(p: number | bigint, o?: number): bigint;
    i64(p: number | bigint, o?: number): bigint;
  };
}

/** Which FFI the process is using. */
export const runtime: "deno" | "bun" = "Bun" in globalThis ? "bun" : "deno";

// A non-literal specifier keeps `deno check` (and JSR's analysis) from resolving bun:ffi.
const bunSpecifier = ["bun", "ffi"].join(":");
const bun: BunFfi | undefined = runtime === "bun" ? await import(bunSpecifier) as BunFfi : undefined;

// ---------------------------------------------------------------------------------------------------------
// Native type mapping.

function denoType(t: NativeType): Deno.NativeType | "void" {
  switch (t) {
    case "pointer":
    case "function":
    case "usize":
      return "u64";
    default:
      return t as Deno.NativeType | "void";
  }
}
function bunType(t: NativeType): string {
  switch (t) {
    case "pointer":
    case "function":
    case "usize":
      return "u64";
    case "buffer":
      return "ptr"; // accepts a typed array (or null) and passes its data pointer
    default:
      return t;
  }
}
function checkDef(where: string, d: FnDef): void {
  if (d.result === "buffer") throw new TypeError(`${where}: "buffer" is an argument type only; return "pointer"`);
  for (const a of d.args) if (a === "void") throw new TypeError(`${where}: "void" is not an argument type`);
}

// ---------------------------------------------------------------------------------------------------------
// Opening libraries.

// Bun's dlopen fails as a whole on the first missing symbol and cannot alias, so under Bun we resolve each
// symbol with libc's dlsym ourselves and bind all the addresses with one linkSymbols call.
interface Dl {
  dlopen(name: Uint8Array, flags: number): bigint;
  dlsym(handle: bigint, name: Uint8Array): bigint;
  dlerror(): bigint;
  dlclose(handle: bigint): number;
}
let dl: Dl | undefined;
function libdl(): Dl {
  if (dl) return dl;
  const defs = {
    dlopen: { args: ["ptr", "i32"], returns: "u64" },
    dlsym: { args: ["u64", "ptr"], returns: "u64" },
    dlerror: { args: [], returns: "u64" },
    dlclose: { args: ["u64"], returns: "i32" },
  };
  let lastErr: unknown;
  for (const name of ["libc.so.6", "libdl.so.2", "libSystem.B.dylib"]) {
    try {
      dl = bun!.dlopen(name, defs).symbols as unknown as Dl;
      return dl;
    } catch (e) {
      lastErr = e;
    }
  }
  throw new Error(`cannot bind dlopen/dlsym from libc: ${lastErr}`);
}
const RTLD_LAZY = 1;

function openBun<S extends SymbolTable>(label: string, names: readonly string[], symbols: S): Library<S> {
  const d = libdl();
  let handle = 0n;
  let path = "";
  const errors: string[] = [];
  for (const n of names) {
    handle = d.dlopen(cstr(n), RTLD_LAZY);
    if (handle !== 0n) {
      path = n;
      break;
    }
    const e = d.dlerror();
    errors.push(e === 0n ? n : readCString(e));
  }
  if (handle === 0n) throw new LibraryNotFound(label, names, errors.join("; "));
  const link: Record<string, BunFfiFn> = {};
  const missing: string[] = [];
  for (const key in symbols) {
    const def = symbols[key];
    checkDef(`${label}.${key}`, def);
    const addr = d.dlsym(handle, cstr(def.name ?? key));
    if (addr === 0n) {
      if (!def.optional) missing.push(def.name ?? key);
      continue;
    }
    link[key] = { args: def.args.map(bunType), returns: bunType(def.result), ptr: addr };
  }
  if (missing.length) {
    d.dlclose(handle);
    throw new SymbolNotFound(path, missing[0]);
  }
  const lib = Object.keys(link).length ? bun!.linkSymbols(link) : undefined;
  const out: Record<string, unknown> = {};
  for (const key in symbols) out[key] = lib?.symbols[key] ?? null;
  return {
    path,
    symbols: out as Bound<S>,
    close() {
      lib?.close();
      d.dlclose(handle);
    },
  };
}

function openDeno<S extends SymbolTable>(label: string, names: readonly string[], symbols: S): Library<S> {
  // Every symbol is optional to Deno so that we, not Deno, decide which absence is an error and name it.
  const defs: Record<string, Deno.ForeignFunction> = {};
  for (const key in symbols) {
    const def = symbols[key];
    checkDef(`${label}.${key}`, def);
    defs[key] = {
      name: def.name ?? key,
      parameters: def.args.map(denoType) as Deno.NativeType[],
      result: denoType(def.result) as Deno.NativeResultType,
      optional: true,
    };
  }
  const errors: string[] = [];
  for (const n of names) {
    let lib: Deno.DynamicLibrary<Record<string, Deno.ForeignFunction>>;
    try {
      lib = Deno.dlopen(n, defs);
    } catch (e) {
      // A missing --allow-ffi is a permission to name, not a missing library.
      if (e instanceof Error && (e.name === "NotCapable" || e.name === "PermissionDenied")) throw e;
      errors.push(e instanceof Error ? e.message : String(e));
      continue;
    }
    const syms = lib.symbols as Record<string, unknown>;
    for (const key in symbols) {
      if (syms[key] == null && !symbols[key].optional) {
        lib.close();
        throw new SymbolNotFound(n, symbols[key].name ?? key);
      }
    }
    return { path: n, symbols: syms as Bound<S>, close: () => lib.close() };
  }
  throw new LibraryNotFound(label, names, errors.join("; "));
}

/**
 * Opens the first loadable of `names` (e.g. ["libcuda.so.1", "libcuda.so"]) and binds `symbols`.
 * Throws LibraryNotFound naming the library when none opens, SymbolNotFound naming the first missing
 * non-optional symbol.
 */
export function dlopen<const S extends SymbolTable>(names: string | readonly string[], symbols: S): Library<S> {
  const list = typeof names === "string" ? [names] : names;
  if (list.length === 0) throw new TypeError("dlopen: no library name given");
  return runtime === "bun" ? openBun(list[0], list, symbols) : openDeno(list[0], list, symbols);
}

const RTLD_NODELETE = 0x1000; // glibc

/**
 * Keeps an opened library (by the name it was opened under) loaded until the process exits, whatever closes
 * it later. Deno closes a worker's libraries when the worker ends (each test file is one): a library that
 * registers process-wide state on load and cannot register it twice (libamd_comgr's LLVM command-line options
 * abort the process with "Option registered more than once" when it is unloaded and loaded again while the
 * libLLVM it registers into stays) must never be unloaded.
 */
export function pinLibrary(name: string): void {
  const libc = dlopen(["libc.so.6", "libdl.so.2"], { dlopen: { args: ["buffer", "i32"], result: "pointer" } });
  try {
    if (libc.symbols.dlopen(cstr(name), RTLD_LAZY | RTLD_NODELETE) === 0n) throw new LibraryNotFound(name, [name], "dlopen(RTLD_NODELETE) failed");
  } finally {
    libc.close();
  }
}

/**
 * The shared libraries mapped into this process, by path (Linux's /proc/self/maps); undefined where that cannot be
 * read (another OS, or a Deno without read permission).
 */
export function mappedLibraries(): Set<string> | undefined {
  if (!granted()) return undefined;
  let text: string;
  try {
    text = readFileSync("/proc/self/maps", "utf8");
  } catch {
    return undefined;
  }
  const out = new Set<string>();
  for (const line of text.split("\n")) {
    const path = line.split(/\s+/)[5];
    if (path?.startsWith("/") && /\.so(\.|$)/.test(path)) out.add(path);
  }
  return out;
}

/**
 * Pins (pinLibrary) every shared library mapped now that was not in `before` (mappedLibraries() taken before a
 * driver was opened): the driver and what it brought in stay loaded for the process's life. Deno unloads a
 * worker's libraries when the worker ends, and a Vulkan driver whose last instance is destroyed is unloaded by the
 * loader; a process that had unloaded Mesa's lavapipe (its libLLVM, marked never to unload, stays) crashed at exit
 * with a jump into lavapipe's unmapped code (README, "Known issues"). Best effort: without /proc, or without read and
 * FFI permission (Deno: no prompt is raised), nothing is pinned.
 */
export function pinLibrariesSince(before: Set<string> | undefined): void {
  if (!before) return;
  const now = mappedLibraries();
  if (!now) return;
  for (const path of now) {
    // (a library pinned once stays mapped, so a later `before` holds it)
    if (before.has(path)) continue;
    try {
      pinLibrary(path);
    } catch {
      // (a library gone again, or no FFI permission: nothing to keep)
    }
  }
}

/** Whether reading /proc/self/maps and calling dlopen go ahead without a permission prompt (always under Bun). */
function granted(): boolean {
  if (bun) return true;
  try {
    return Deno.permissions.querySync({ name: "ffi" }).state === "granted" &&
      Deno.permissions.querySync({ name: "read", path: "/proc/self/maps" }).state === "granted";
  } catch {
    return false;
  }
}

/** Binds a native function pointer (from vkGetDeviceProcAddr, cuGetProcAddress, an extension table...). */
export function fnFromPointer<const D extends FnDef>(ptr: Pointer | number, def: D): NativeFn<D> {
  checkDef("fnFromPointer", def);
  if (BigInt(ptr) === 0n) throw new TypeError("fnFromPointer: NULL function pointer");
  if (bun) {
    return bun.CFunction({ ptr: BigInt(ptr), args: def.args.map(bunType), returns: bunType(def.result) }) as NativeFn<D>;
  }
  const fp = new Deno.UnsafeFnPointer(Deno.UnsafePointer.create(BigInt(ptr))!, {
    parameters: def.args.map(denoType) as Deno.NativeType[],
    result: denoType(def.result) as Deno.NativeResultType,
  });
  return fp.call.bind(fp) as unknown as NativeFn<D>;
}

// ---------------------------------------------------------------------------------------------------------
// Pointers and memory.

/**
 * The address of a typed array's (or ArrayBuffer's) first byte; 0n for an empty one. The array must stay
 * reachable while native code may use the address (see keepAlive).
 */
export function ptrOf(view: ArrayBufferView | ArrayBuffer): Pointer {
  if (view.byteLength === 0) return 0n;
  if (bun) return BigInt(bun.ptr(view));
  // V8 keeps small typed arrays inside its moving heap; reading .buffer moves one out for good, so the
  // address taken below stays valid after the next GC.
  if (ArrayBuffer.isView(view)) void view.buffer;
  return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(view as BufferSource)));
}

/**
 * An ArrayBuffer aliasing `byteLength` bytes of native memory at `ptr` (mapped GPU memory, host-pinned
 * buffers, a struct a driver returned). Nothing is copied; the memory must outlive the view.
 */
export function ptrView(ptr: Pointer | number, byteLength: number): ArrayBuffer {
  if (byteLength === 0) return new ArrayBuffer(0);
  const p = BigInt(ptr);
  if (p === 0n) throw new TypeError("ptrView: NULL pointer");
  if (bun) return bun.toArrayBuffer(p, 0, byteLength);
  return Deno.UnsafePointerView.getArrayBuffer(Deno.UnsafePointer.create(p)!, byteLength);
}

const utf8 = new TextEncoder();
const utf8d = new TextDecoder();

/** A NUL-terminated UTF-8 copy of `s`, for "buffer" arguments and pointer fields. */
export function cstr(s: string): Uint8Array {
  const bytes = utf8.encode(s);
  // An explicit ArrayBuffer is never a V8 on-heap array, so its address is stable once taken.
  const out = new Uint8Array(new ArrayBuffer(bytes.length + 1));
  out.set(bytes);
  return out;
}

/** Reads a NUL-terminated UTF-8 string at `ptr` ("" for NULL). */
export function readCString(ptr: Pointer | number): string {
  const p = BigInt(ptr);
  if (p === 0n) return "";
  if (bun) return String(new bun.CString(p));
  return Deno.UnsafePointerView.getCString(Deno.UnsafePointer.create(p)!);
}

/** Decodes a NUL-terminated string out of a byte array (a char[N] field, an out buffer). */
export function cstringFrom(bytes: Uint8Array): string {
  const end = bytes.indexOf(0);
  return utf8d.decode(end < 0 ? bytes : bytes.subarray(0, end));
}

type ReadKind = "u8" | "i8" | "u16" | "i16" | "u32" | "i32" | "f32" | "f64";
function readNum(kind: ReadKind, ptr: Pointer | number, offset: number): number {
  const p = BigInt(ptr);
  if (bun) return bun.read[kind](p, offset);
  const v = new Deno.UnsafePointerView(Deno.UnsafePointer.create(p)!);
  switch (kind) {
    case "u8":
      return v.getUint8(offset);
    case "i8":
      return v.getInt8(offset);
    case "u16":
      return v.getUint16(offset);
    case "i16":
      return v.getInt16(offset);
    case "u32":
      return v.getUint32(offset);
    case "i32":
      return v.getInt32(offset);
    case "f32":
      return v.getFloat32(offset);
    case "f64":
      return v.getFloat64(offset);
  }
}
export function readU8(ptr: Pointer | number, offset = 0): number {
  return readNum("u8", ptr, offset);
}
export function readU16(ptr: Pointer | number, offset = 0): number {
  return readNum("u16", ptr, offset);
}
export function readU32(ptr: Pointer | number, offset = 0): number {
  return readNum("u32", ptr, offset);
}
export function readI32(ptr: Pointer | number, offset = 0): number {
  return readNum("i32", ptr, offset);
}
export function readF32(ptr: Pointer | number, offset = 0): number {
  return readNum("f32", ptr, offset);
}
export function readF64(ptr: Pointer | number, offset = 0): number {
  return readNum("f64", ptr, offset);
}
export function readU64(ptr: Pointer | number, offset = 0): bigint {
  const p = BigInt(ptr);
  if (bun) return bun.read.u64(p, offset);
  return new Deno.UnsafePointerView(Deno.UnsafePointer.create(p)!).getBigUint64(offset);
}
export function readI64(ptr: Pointer | number, offset = 0): bigint {
  const p = BigInt(ptr);
  if (bun) return bun.read.i64(p, offset);
  return new Deno.UnsafePointerView(Deno.UnsafePointer.create(p)!).getBigInt64(offset);
}
/** Reads a pointer-sized value at ptr+offset. */
export function readPtr(ptr: Pointer | number, offset = 0): Pointer {
  return readU64(ptr, offset);
}

// Native code may hold addresses of JS arrays past the call that passed them (a create-info's pName, a
// pCode). keepAlive ties those arrays' lifetimes to an owner object, typically the packed struct.
const kept = new WeakMap<object, unknown[]>();
/** Keeps `refs` reachable for as long as `owner` is. */
export function keepAlive(owner: object, ...refs: unknown[]): void {
  const list = kept.get(owner);
  if (list) list.push(...refs);
  else kept.set(owner, refs);
}

/**
 * An array of pointers (char** / T**) from strings (copied to C strings), arrays (their addresses) and raw
 * addresses. The referents are kept alive with the returned array.
 */
export function ptrArray(items: readonly (string | ArrayBufferView | Pointer | number | null)[]): BigUint64Array {
  const out = new BigUint64Array(new ArrayBuffer(Math.max(items.length, 1) * 8));
  const refs: unknown[] = [];
  items.forEach((it, i) => {
    if (it === null) out[i] = 0n;
    else if (typeof it === "string") {
      const s = cstr(it);
      refs.push(s);
      out[i] = ptrOf(s);
    } else if (typeof it === "bigint" || typeof it === "number") out[i] = BigInt(it);
    else {
      refs.push(it);
      out[i] = ptrOf(it);
    }
  });
  if (refs.length) keepAlive(out, ...refs);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Callbacks.

type CbArgValue<T extends NativeType> = T extends Wide ? bigint : number;
export type CallbackArgs<A extends readonly NativeType[]> = { -readonly [K in keyof A]: CbArgValue<A[K]> };
export type CallbackResult<T extends NativeType> = T extends "void" ? void : T extends Wide ? bigint | number : number;
export type CallbackFn<D extends FnDef> = (...args: CallbackArgs<D["args"]>) => CallbackResult<D["result"]>;

/** A JS function callable from C. `ptr` is its address ("function" arguments take it). */
export interface Callback {
  readonly ptr: Pointer;
  /** Frees the trampoline; C must not call it afterwards. A thread-safe callback keeps the process alive until closed. */
  close(): void;
}

/**
 * Makes a C-callable function. Callers from other native threads (the HSA queue error callback, the system
 * event handler) need `threadSafe: true`; such calls run on the JS thread when its event loop turns. A thread-safe
 * callback keeps the process alive until closed unless `unref` (it is still called while the loop runs).
 */
export function callback<const D extends FnDef>(def: D, fn: CallbackFn<D>, opts: { threadSafe?: boolean; unref?: boolean } = {}): Callback {
  checkDef("callback", def);
  if (def.args.includes("buffer")) throw new TypeError(`callback: "buffer" arguments are not supported; use "pointer"`);
  if (bun) {
    const cb = new bun.JSCallback(fn as (...a: never[]) => unknown, {
      args: def.args.map(bunType),
      returns: bunType(def.result),
      threadsafe: opts.threadSafe ?? false,
    });
    const ptr = BigInt(cb.ptr ?? 0);
    return { ptr, close: () => cb.close() };
  }
  const ddef = {
    parameters: def.args.map(denoType) as Deno.NativeType[],
    result: denoType(def.result) as Deno.NativeResultType,
  };
  const f = fn as unknown as Deno.UnsafeCallbackFunction<Deno.NativeType[], Deno.NativeResultType>;
  const cb = opts.threadSafe ? Deno.UnsafeCallback.threadSafe(ddef, f) : new Deno.UnsafeCallback(ddef, f);
  // A callback that only reports faults (HSA's queue error callback) must not keep an idle process alive.
  if (opts.threadSafe && opts.unref) cb.unref();
  return { ptr: BigInt(Deno.UnsafePointer.value(cb.pointer)), close: () => cb.close() };
}
