// libnccl through ffi/nccl.ts. No NCCL is installed here or in CI, so the symbol table (arity and ABI class of
// each parameter and result) and the enum values are checked against a copy of NCCL 2.30.7's nccl.h
// (tests/ffi/nccl/SOURCE.md). Where a libnccl opens (the system's, or POOT_NCCL_LIBRARY naming one), the
// version, error strings and the typed error of a communicator on a device that is not there are checked
// for real; where none opens, openNccl must fail with LibraryNotFound (a clear error, not a crash).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { LibraryNotFound } from "../../ffi/lib.ts";
import { NCCL_DTYPE, NCCL_LIBRARY, NCCL_OP, NCCL_UNIQUE_ID_BYTES, NcclError, ncclSymbols, openNccl } from "../../ffi/nccl.ts";
import { classOf, Header } from "./cdecl.ts";

const DIR = fileURLToPath(new URL("./nccl/", import.meta.url));
const CUDA_INCLUDE = "/usr/local/cuda/include";

function preprocess(): Header | string {
  try {
    const out = execFileSync("cc", ["-E", "-P", `-I${DIR}`, `-I${CUDA_INCLUDE}`, "-x", "c", "-"], {
      input: "#include <nccl.h>\n", encoding: "utf8", stdio: ["pipe", "pipe", "pipe"], maxBuffer: 64 << 20,
    });
    return new Header(out);
  } catch (e) {
    return `cannot preprocess nccl.h with the CUDA headers: ${(e as Error).message.split("\n")[0]}`;
  }
}
const header = preprocess();

test("libnccl symbol table matches nccl.h", { skip: typeof header === "string" ? header : false }, () => {
  const h = header as Header;
  for (const [key, def] of Object.entries(ncclSymbols)) {
    const p = h.prototype(key);
    assert.ok(p, `${key} is declared in nccl.h`);
    assert.deepEqual([p.result, ...p.params].filter((c) => c.startsWith("?")), [], `${key}: types the reader could not resolve`);
    assert.equal(def.args.length, p.params.length, `${key}: argument count`);
    assert.deepEqual(def.args.map(classOf), p.params, `${key}: argument classes`);
    assert.equal(classOf(def.result), p.result, `${key}: result class`);
  }
  // The multi-process door takes the 128-byte id by value: deliberately unbound (ffi/nccl.ts says why).
  assert.equal(h.prototype("ncclCommInitRank")?.params.length, 4);
  assert.equal("ncclCommInitRank" in ncclSymbols, false);
});

test("NCCL enum values and the unique id size equal nccl.h's", { skip: typeof header === "string" ? header : false }, () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-nccl-"));
  try {
    const names: [string, number][] = [
      ["ncclFloat16", NCCL_DTYPE.f16], ["ncclFloat32", NCCL_DTYPE.f32], ["ncclFloat64", NCCL_DTYPE.f64],
      ["ncclBfloat16", NCCL_DTYPE.bf16], ["ncclInt32", NCCL_DTYPE.i32], ["ncclUint32", NCCL_DTYPE.u32],
      ["ncclInt8", NCCL_DTYPE.i8], ["ncclUint8", NCCL_DTYPE.u8], ["ncclSum", NCCL_OP.sum], ["ncclProd", NCCL_OP.prod],
      ["ncclMax", NCCL_OP.max], ["ncclMin", NCCL_OP.min], ["ncclAvg", NCCL_OP.avg], ["NCCL_UNIQUE_ID_BYTES", NCCL_UNIQUE_ID_BYTES],
      ["(int)sizeof(ncclUniqueId)", NCCL_UNIQUE_ID_BYTES],
    ];
    const src = `#include <stdio.h>\n#include <nccl.h>\nint main(void) {\n${names.map(([n]) => `  printf("%d\\n", (int)(${n}));`).join("\n")}\n  return 0;\n}\n`;
    writeFileSync(join(dir, "e.c"), src);
    execFileSync("cc", [`-I${DIR}`, `-I${CUDA_INCLUDE}`, "-o", join(dir, "e"), join(dir, "e.c")], { stdio: "pipe" });
    const got = execFileSync(join(dir, "e"), { encoding: "utf8" }).trim().split("\n").map(Number);
    names.forEach(([n, want], i) => assert.equal(got[i], want, n));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const libName = process.env.POOT_NCCL_LIBRARY;
let opened: ReturnType<typeof openNccl> | string;
try {
  opened = openNccl(libName ?? NCCL_LIBRARY);
} catch (e) {
  opened = e instanceof LibraryNotFound ? `no libnccl here (${e.message.slice(0, 80)}...)` : String(e);
}

test("without libnccl, openNccl fails with LibraryNotFound naming what it tried", { skip: typeof opened !== "string" ? "a libnccl is present" : false }, () => {
  assert.throws(() => openNccl(["libnccl-not-here.so.2"]), (e: unknown) => e instanceof LibraryNotFound && /libnccl-not-here/.test((e as Error).message));
});

test("libnccl: version, error strings, and a typed error for a communicator on a missing GPU", { skip: typeof opened === "string" ? opened : false }, () => {
  const n = opened as ReturnType<typeof openNccl>;
  try {
    const v = n.version();
    assert.ok(v >= 20000 && v < 100000, `version ${v}`);
    assert.match(n.errorString(4), /argument/i);
    assert.equal(n.errorString(0), "no error");
    let cudaPresent = true;
    try {
      execFileSync("nvidia-smi", ["-L"], { stdio: "pipe" });
    } catch {
      cudaPresent = false;
    }
    if (!cudaPresent) {
      // ncclCommInitAll on a machine without a GPU: an NcclError naming the call, never a crash.
      assert.throws(() => n.commInitAll([0]), (e: unknown) => e instanceof NcclError && e.fn === "ncclCommInitAll" && e.code !== 0);
    }
  } finally {
    n.close();
  }
});
