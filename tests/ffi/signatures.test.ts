// Every symbol table entry against its C prototype (arity and the ABI class of each parameter and result),
// read from the preprocessed headers. This is what keeps the CUDA and HSA tables honest on machines that
// cannot call them.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import type { SymbolTable } from "../../ffi/lib.ts";
import { cudaSymbols } from "../../ffi/cuda.ts";
import { vulkanSymbols } from "../../ffi/vulkan.ts";
import { hsaSymbols } from "../../ffi/hsa.ts";
import { classOf, Header } from "./cdecl.ts";

function preprocess(includes: string[]): Header | string {
  try {
    const src = includes.map((h) => `#include <${h}>\n`).join("");
    const out = execFileSync("cc", ["-E", "-P", "-I/usr/local/cuda/include", "-x", "c", "-"], { input: src, encoding: "utf8", stdio: ["pipe", "pipe", "pipe"], maxBuffer: 64 << 20 });
    return new Header(out);
  } catch (e) {
    return `cannot preprocess ${includes.join(", ")}: ${(e as Error).message.split("\n")[0]}`;
  }
}

function checkTable(h: Header, table: SymbolTable): void {
  let checked = 0;
  for (const [key, def] of Object.entries(table)) {
    const native = def.name ?? key;
    const p = h.prototype(native);
    if (!p) {
      // A newer (optional) entry point the installed header maps elsewhere or lacks.
      assert.ok(def.optional, `${native} is declared in the header`);
      continue;
    }
    const unknown = [p.result, ...p.params].filter((c) => c.startsWith("?"));
    assert.deepEqual(unknown, [], `${native}: types the reader could not resolve`);
    assert.equal(def.args.length, p.params.length, `${native}: argument count`);
    assert.deepEqual(def.args.map(classOf), p.params, `${native}: argument classes (W = 64-bit, N = 32-bit or narrower)`);
    assert.equal(classOf(def.result), p.result, `${native}: result class`);
    checked++;
  }
  assert.ok(checked >= Object.keys(table).length - 2, `checked ${checked}`);
}

const cuda = preprocess(["cuda.h"]);
const vulkan = preprocess(["vulkan/vulkan_core.h"]);
const hsa = preprocess(["hsa/hsa.h", "hsa/hsa_ext_amd.h"]);

test("libcuda symbol table matches cuda.h", { skip: typeof cuda === "string" ? cuda : false }, () => {
  checkTable(cuda as Header, cudaSymbols);
});
test("libvulkan symbol table matches vulkan_core.h", { skip: typeof vulkan === "string" ? vulkan : false }, () => {
  checkTable(vulkan as Header, vulkanSymbols);
});
test("libhsa-runtime64 symbol table matches hsa.h and hsa_ext_amd.h", { skip: typeof hsa === "string" ? hsa : false }, () => {
  checkTable(hsa as Header, hsaSymbols);
});
test("the prototype reader classifies what it reads", { skip: typeof cuda === "string" ? cuda : false }, () => {
  const h = cuda as Header;
  assert.deepEqual(h.prototype("cuMemAlloc_v2"), { result: "N", params: ["W", "W"] });
  assert.deepEqual(h.prototype("cuDeviceGetAttribute"), { result: "N", params: ["W", "N", "N"] });
  assert.deepEqual(h.prototype("cuCtxSynchronize"), { result: "N", params: [] });
  assert.equal(h.prototype("cuNoSuchFunction"), undefined);
});
