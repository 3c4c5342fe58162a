// ffi/lib.ts against libc: typed errors for a missing library or symbol, optional and aliased symbols,
// 64-bit results as bigint, pointers from typed arrays, native memory views, C strings, callbacks.

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  callback,
  cstr,
  cstringFrom,
  defineSymbols,
  dlopen,
  fnFromPointer,
  LibraryNotFound,
  ptrArray,
  ptrOf,
  ptrView,
  readCString,
  readF64,
  readI32,
  readI64,
  readPtr,
  readU16,
  readU32,
  readU64,
  readU8,
  runtime,
  SymbolNotFound,
} from "../../ffi/lib.ts";

const LIBC = ["libc.so.6", "libc.so"];
const libcSymbols = defineSymbols({
  strlen: { args: ["buffer"], result: "usize" },
  strlenAt: { name: "strlen", args: ["pointer"], result: "usize" },
  strtoull: { args: ["buffer", "pointer", "i32"], result: "u64" },
  labs: { args: ["i64"], result: "i64" },
  memcpy: { args: ["pointer", "pointer", "usize"], result: "pointer" },
  qsort: { args: ["buffer", "usize", "usize", "function"], result: "void" },
  getenv: { args: ["buffer"], result: "pointer" },
  abs: { args: ["i32"], result: "i32" },
  poot_no_such_symbol_v9: { args: [], result: "void", optional: true },
});
const libc = dlopen(LIBC, libcSymbols);
const c = libc.symbols;
const m = dlopen(["libm.so.6", "libm.so"], { sqrt: { args: ["f64"], result: "f64" }, sqrtf: { args: ["f32"], result: "f32" } }).symbols;

test(`runtime is detected (${runtime})`, () => {
  assert.equal(runtime, "Bun" in globalThis ? "bun" : "deno");
});

test("a missing library raises LibraryNotFound naming it", () => {
  const e = catchError(() => dlopen(["libpoot-does-not-exist.so.7", "libpoot-nope.so"], { f: { args: [], result: "void" } }));
  assert.ok(e instanceof LibraryNotFound, String(e));
  assert.equal(e.name, "LibraryNotFound");
  assert.equal(e.library, "libpoot-does-not-exist.so.7");
  assert.deepEqual(e.tried, ["libpoot-does-not-exist.so.7", "libpoot-nope.so"]);
  assert.match(e.message, /libpoot-does-not-exist\.so\.7/);
});

test("a missing symbol raises SymbolNotFound naming it and the library", () => {
  const e = catchError(() => dlopen(LIBC, { strlen: { args: ["buffer"], result: "usize" }, poot_bogus_symbol: { args: ["i32"], result: "i32" } }));
  assert.ok(e instanceof SymbolNotFound, String(e));
  assert.equal(e.symbol, "poot_bogus_symbol");
  assert.equal(e.library, "libc.so.6");
  assert.match(e.message, /poot_bogus_symbol/);
});

test("an optional missing symbol binds to null and the rest still load", () => {
  assert.equal(c.poot_no_such_symbol_v9, null);
  assert.equal(typeof c.strlen, "function");
  assert.equal(libc.path, "libc.so.6");
});

test("scalars, 64-bit results as bigint, floats", () => {
  assert.equal(c.abs(-5), 5);
  assert.equal(c.labs(-(2n ** 40n)), 2n ** 40n);
  assert.equal(c.labs(-3), 3n);
  assert.equal(c.strtoull(cstr("18446744073709551615"), 0n, 10), 2n ** 64n - 1n);
  assert.equal(m.sqrt(2), Math.SQRT2);
  assert.equal(m.sqrtf(2.25), 1.5);
  assert.equal(typeof c.strlen(cstr("hello")), "bigint");
  assert.equal(c.strlen(cstr("hello")), 5n);
});

test("aliases bind one native symbol under a second signature", () => {
  const s = cstr("pointer form");
  assert.equal(c.strlenAt(ptrOf(s)), 12n);
});

test("pointers: ptrOf, ptrView aliasing, reads at addresses", () => {
  const a = new Uint8Array(new ArrayBuffer(32));
  const p = ptrOf(a);
  assert.equal(typeof p, "bigint");
  assert.notEqual(p, 0n);
  assert.equal(ptrOf(a.subarray(8)), p + 8n);
  assert.equal(ptrOf(new Uint8Array(0)), 0n);
  const v = new Uint8Array(ptrView(p, 32));
  v[3] = 77;
  assert.equal(a[3], 77, "ptrView aliases the memory, it does not copy");
  const dv = new DataView(a.buffer);
  dv.setUint16(4, 0xbeef, true);
  dv.setInt32(8, -12345, true);
  dv.setBigUint64(16, 0x1122334455667788n, true);
  dv.setFloat64(24, 6.5, true);
  assert.equal(readU8(p, 3), 77);
  assert.equal(readU16(p, 4), 0xbeef);
  assert.equal(readI32(p, 8), -12345);
  assert.equal(readU32(p, 8), 2 ** 32 - 12345);
  assert.equal(readU64(p, 16), 0x1122334455667788n);
  assert.equal(readPtr(p, 16), 0x1122334455667788n);
  assert.equal(readI64(p, 16), 0x1122334455667788n);
  assert.equal(readF64(p, 24), 6.5);
  // Native-to-native: memcpy between two arrays by address.
  const b = new Uint8Array(new ArrayBuffer(32));
  assert.equal(c.memcpy(ptrOf(b), p, 32), ptrOf(b));
  assert.deepEqual(b, a);
});

test("C strings both ways, pointer arrays", () => {
  const s = cstr("héllo");
  assert.equal(s[s.length - 1], 0);
  assert.equal(readCString(ptrOf(s)), "héllo");
  assert.equal(readCString(0n), "");
  assert.equal(cstringFrom(new Uint8Array([104, 105, 0, 120])), "hi");
  const arr = ptrArray(["ab", "cde", null]);
  assert.equal(readCString(arr[0]), "ab");
  assert.equal(readCString(arr[1]), "cde");
  assert.equal(arr[2], 0n);
  process.env.POOT_FFI_TEST = "value-42";
  const env = c.getenv(cstr("POOT_FFI_TEST"));
  // Deno and Bun keep their own copy of the environment; only check the call is well-formed.
  assert.ok(env === 0n || readCString(env) === "value-42");
});

test("callbacks: qsort calls a JS comparator; close releases it", () => {
  const cmp = callback({ args: ["pointer", "pointer"], result: "i32" }, (a, b) => readI32(a) - readI32(b));
  assert.notEqual(cmp.ptr, 0n);
  const xs = new Int32Array([5, -3, 9, 0, 2]);
  c.qsort(xs, xs.length, 4, cmp.ptr);
  assert.deepEqual(Array.from(xs), [-3, 0, 2, 5, 9]);
  cmp.close();
});

test("fnFromPointer binds a function pointer (here a JS callback's trampoline)", () => {
  let seen = 0n;
  const cb = callback({ args: ["u64", "i32"], result: "i64" }, (x, y) => {
    seen = x;
    return x * 2n + BigInt(y);
  });
  const f = fnFromPointer(cb.ptr, { args: ["u64", "i32"], result: "i64" });
  assert.equal(f(2n ** 40n, 3), 2n ** 41n + 3n);
  assert.equal(seen, 2n ** 40n);
  cb.close();
  assert.throws(() => fnFromPointer(0n, { args: [], result: "void" }), /NULL/);
});

test("declaring a buffer result is refused", () => {
  assert.throws(() => dlopen(LIBC, { strlen: { args: ["buffer"], result: "buffer" } }), TypeError);
});

function catchError(f: () => unknown): Error {
  try {
    f();
  } catch (e) {
    return e as Error;
  }
  throw new Error("expected an error");
}
