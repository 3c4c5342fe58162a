// ffi/layout.ts: the layout rules themselves, encode/decode, and every struct poot declares checked against
// the C headers' sizeof/_Alignof/offsetof (tests/ffi/offsets.c, compiled here when cc and the headers exist).

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { array, chars, decode, decodeArray, encode, offsetOf, pack, packArray, type Struct, struct, union } from "../../ffi/layout.ts";
import { ptrView, readCString, readU32 } from "../../ffi/lib.ts";
import * as vs from "../../ffi/vulkan_structs.ts";
import * as cu from "../../ffi/cuda.ts";
import * as hs from "../../ffi/hsa.ts";

const here = dirname(fileURLToPath(import.meta.url));
type CLayout = { size: number; align: number; fields: Record<string, number> };

// Ground truth: compile offsets.c when possible, else the checked-in JSON made from it.
function compiled(): Record<string, CLayout> | string {
  const dir = mkdtempSync(join(tmpdir(), "poot-offsets-"));
  try {
    const exe = join(dir, "offsets");
    execFileSync("cc", ["-I/usr/local/cuda/include", join(here, "offsets.c"), "-o", exe], { stdio: "pipe" });
    return JSON.parse(execFileSync(exe, { encoding: "utf8" }));
  } catch (e) {
    return (e as Error).message.split("\n")[0];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const expected: Record<string, CLayout> = JSON.parse(readFileSync(join(here, "offsets.expected.json"), "utf8"));
const fresh = compiled();
const truth: Record<string, CLayout> = typeof fresh === "string" ? expected : { ...expected, ...fresh };
const source = typeof fresh === "string"
  ? `checked-in offsets.expected.json (cc/headers unavailable: ${fresh})`
  : `offsets.c compiled here (${Object.keys(fresh).length} structs)` +
    (Object.keys(fresh).length < Object.keys(expected).length ? ` + offsets.expected.json for the rest` : "");

const declared: Struct[] = [vs, cu, hs].flatMap((m) => Object.values(m as Record<string, unknown>).filter((v): v is Struct => typeof v === "object" && v !== null && (v as Struct).kind === "struct"));

test(`struct layouts equal the C headers: ${source}`, () => {
  assert.ok(declared.length >= 60, `declared ${declared.length}`);
  for (const s of declared) {
    const c = truth[s.name];
    assert.ok(c, `${s.name} is listed in tests/ffi/offsets.c`);
    assert.equal(s.size, c.size, `sizeof(${s.name})`);
    assert.equal(s.align, c.align, `_Alignof(${s.name})`);
    assert.deepEqual(Object.keys(s.fields), Object.keys(c.fields), `${s.name} has the C fields in order`);
    for (const f of Object.keys(c.fields)) assert.equal(s.offsets[f], c.fields[f], `offsetof(${s.name}, ${f})`);
  }
  for (const name of ["VkBufferCreateInfo", "VkComputePipelineCreateInfo", "VkSubmitInfo", "VkWriteDescriptorSet", "VkDescriptorSetLayoutBinding", "VkBufferMemoryBarrier", "VkMemoryBarrier", "VkPhysicalDeviceProperties", "VkPhysicalDeviceLimits", "hsa_kernel_dispatch_packet_t", "hsa_agent_dispatch_packet_t", "hsa_queue_t", "CUDA_LAUNCH_PARAMS", "CUDA_MEMCPY2D"]) {
    assert.ok(declared.some((s) => s.name === name), `${name} is declared`);
  }
});

test("the checked-in offsets JSON agrees with a fresh compile", { skip: typeof fresh === "string" ? `no compile: ${fresh}` : false }, () => {
  for (const [name, c] of Object.entries(fresh as Record<string, CLayout>)) assert.deepEqual(c, expected[name], name);
});

test("natural alignment, nesting, arrays and unions", () => {
  const inner = struct("inner", { a: "u8", b: "u64" });
  assert.deepEqual([inner.size, inner.align, inner.offsets.b], [16, 8, 8]);
  const outer = struct("outer", { c: "u16", in: inner, d: array("u32", 3), e: "u8", s: chars(5) });
  assert.deepEqual([outer.offsets.in, outer.offsets.d, outer.offsets.e, outer.offsets.s, outer.size], [8, 24, 36, 37, 48]);
  assert.equal(offsetOf(outer, "in.b"), 16);
  assert.equal(offsetOf(outer, "d.2"), 32);
  const u = union("u", { x: "u32", y: "f64", z: array("u8", 10) });
  assert.deepEqual([u.size, u.align, u.offsets.z], [16, 8, 0]);
  const forced = struct("forced", { x: "u32" }, { align: 64 });
  assert.deepEqual([forced.size, forced.align], [64, 64]);
  assert.throws(() => offsetOf(outer, "nope"), /no field nope/);
});

test("encode and decode round-trip every field kind", () => {
  const inner = struct("inner", { a: "i8", b: "u64" });
  const s = struct("s", { f: "f32", d: "f64", i: "i32", u: "u32", w: "i64", p: "pointer", n: inner, arr: array("u16", 4), name: chars(8), yes: "u32" });
  const bytes = new Uint8Array(s.size);
  encode(s, { f: 1.5, d: -2.25, i: -7, u: 0xfffffff0, w: -5n, p: 0x1234n, n: { a: -3, b: 1n << 63n }, arr: [1, 2, 3], name: "abc", yes: true }, bytes);
  const back = decode(s, bytes);
  assert.deepEqual(back, { f: 1.5, d: -2.25, i: -7, u: 0xfffffff0, w: -5n, p: 0x1234n, n: { a: -3, b: 1n << 63n }, arr: [1, 2, 3, 0], name: "abc", yes: 1 });
  assert.throws(() => encode(s, { name: "too long a name" }, bytes), RangeError);
  assert.throws(() => encode(s, { nope: 1 } as never, bytes), /no field nope/);
  const two = packArray(inner, [{ a: 1, b: 2n }, { a: 3, b: 4n }]);
  assert.deepEqual(decodeArray(inner, two, 2), [{ a: 1, b: 2n }, { a: 3, b: 4n }]);
});

test("pack writes defaults, pointers to arrays and strings, and keeps them alive", () => {
  const info = pack(vs.VkBufferCreateInfo, { size: 4096n, usage: 0x20 });
  const d = decode(vs.VkBufferCreateInfo, info);
  assert.equal(d.sType, 12); // VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, from the layout's defaults
  assert.equal(d.size, 4096n);
  const code = new Uint32Array([0x07230203, 1, 2, 3]);
  const sm = pack(vs.VkShaderModuleCreateInfo, { codeSize: code.byteLength, pCode: code });
  const pCode = decode(vs.VkShaderModuleCreateInfo, sm).pCode;
  assert.equal(readU32(pCode, 0), 0x07230203);
  assert.deepEqual(new Uint32Array(ptrView(pCode, 16)), code);
  const stage = pack(vs.VkPipelineShaderStageCreateInfo, { pName: "main" });
  assert.equal(readCString(decode(vs.VkPipelineShaderStageCreateInfo, stage).pName), "main");
  const nested = pack(vs.VkComputePipelineCreateInfo, { stage: { pName: "entry", module: 7n }, layout: 9n });
  const nd = decode(vs.VkComputePipelineCreateInfo, nested);
  assert.equal(nd.sType, 29);
  assert.equal(nd.stage.sType, 18, "nested structs get their defaults too");
  assert.equal(readCString(nd.stage.pName), "entry");
  assert.deepEqual([nd.stage.module, nd.layout], [7n, 9n]);
  // encode writes only what it is given: no defaults.
  const raw = new Uint8Array(vs.VkBufferCreateInfo.size);
  encode(vs.VkBufferCreateInfo, { usage: 1 }, raw);
  assert.equal(decode(vs.VkBufferCreateInfo, raw).sType, 0);
});
