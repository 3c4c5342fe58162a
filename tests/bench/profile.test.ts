// bench/profile.ts kernelTable: several backends' per-kernel times matched by kernel name, never by position
// (their plans differ: Vulkan and WebGPU fuse what PTX launches as two kernels), each backend's own kernels
// listed under it with its own share of the token, and the token by kind of kernel.
import { test } from "node:test";
import assert from "node:assert/strict";
import { kernelTable, type KernelRow, type Profile } from "../../bench/profile.ts";

const row = (first: number, name: string, count: number, micros: number, bytes: number): KernelRow => ({ first, name, count, micros, busy: micros, bytes });
const prof = (backend: string, rows: KernelRow[]): Profile => ({ backend, device: "x", steps: 0, deviceMs: 0, wallMs: 0, rows });

// ptx launches the split attention as two kernels and has one more step before the big gemv; vulkan fuses them.
const ptx = prof("ptx", [
  row(0, "gather_rows", 1, 2, 4000),
  row(1, "attention_partial", 2, 5, 10_000),
  row(2, "attention_combine", 2, 1, 1000),
  row(3, "gemv_big_l128", 2, 20, 40_000_000),
]);
const vulkan = prof("vulkan", [
  row(0, "gather_fused", 1, 3, 4000),
  row(1, "attention_fused", 2, 8, 10_000),
  row(2, "gemv_big_l128", 2, 25, 40_000_000),
]);

test("kernelTable matches kernels by name: the gemv row holds both backends' figures, whatever its step index", () => {
  const t = kernelTable([ptx, vulkan]).split("\n");
  const gemv = t.filter((l) => l.startsWith("gemv_big_l128"));
  assert.equal(gemv.length, 1);
  const cells = gemv[0].split("|").map((c) => c.trim().split(/\s+/));
  // n, µs, GB/s, share of that backend's token (ptx 2+10+2+40 = 54 µs; vulkan 3+16+50 = 69 µs)
  assert.deepEqual(cells[1], ["2", "20.00", "2000", "74.1"]);
  assert.deepEqual(cells[2], ["2", "25.00", "1600", "72.5"]);
  assert.ok(!t.some((l) => l.includes("*")), "no row lined up by position");
});

test("kernelTable lists each backend's own kernels under it with its own share", () => {
  const t = kernelTable([ptx, vulkan]).split("\n");
  const at = (h: string) => t.indexOf(h);
  assert.ok(at("only on ptx:") > 0 && at("only on vulkan:") > at("only on ptx:"));
  const ptxOwn = t.slice(at("only on ptx:") + 1, at("only on vulkan:")).map((l) => l.trim().split(/\s+/));
  assert.deepEqual(ptxOwn.map((c) => c[0]), ["gather_rows", "attention_partial", "attention_combine"]);
  assert.deepEqual(ptxOwn[1], ["attention_partial", "2", "5.00", "2", "18.5"]);
  const vkOwn = t.slice(at("only on vulkan:") + 1).filter((l) => l.startsWith("  ")).map((l) => l.trim().split(/\s+/)[0]);
  assert.deepEqual(vkOwn, ["gather_fused", "attention_fused"]);
});

test("kernelTable sums the token by kind, so a fused kernel lines up with the pair it replaces", () => {
  const t = kernelTable([ptx, vulkan]).split("\n");
  const attn = t.find((l) => l.startsWith("attention "))!.split("|").map((c) => c.trim().split(/\s+/));
  assert.deepEqual(attn[1], ["4", "12.0", "22.2"]);
  assert.deepEqual(attn[2], ["2", "16.0", "23.2"]);
  const sum = t.find((l) => l.startsWith("sum of kernels"))!.split("|").map((c) => c.trim());
  assert.deepEqual(sum.slice(1), ["0.054", "0.069"]);
});

test("kernelTable of one backend lists all its kernels in its table; none is empty text", () => {
  const t = kernelTable([vulkan]).split("\n");
  assert.equal(t.filter((l) => / \| /.test(l) && /^(gather|attention|gemv)_/.test(l)).length, 3);
  assert.ok(!t.some((l) => l.startsWith("only on")));
  assert.equal(kernelTable([]), "");
});

test("bench/kernels.ts --backend variants: attention options parse into CompileOptions, an unknown one is named", async () => {
  const { backendVariant } = await import("../../bench/kernels.ts");
  const v = backendVariant("ptx:attention-fuse+no-decode-flash+attention-unroll4+attention-wg128+splits8+no-attention-spread", false, true);
  assert.equal(v.name, "ptx");
  assert.equal(v.compile.attentionSpread, false);
  assert.equal(v.compile.attentionUnroll, 4);
  assert.equal(v.compile.attentionWorkgroup, 128);
  assert.equal(v.compile.attentionSplits, 8);
  assert.equal(v.compile.decodeFlash, false);
  assert.deepEqual(backendVariant("ptx:drop-attention", false, true).drop, ["attention"]);
  assert.throws(() => backendVariant("ptx:attention-unrollx", false, true), /unknown variant attention-unrollx of ptx/);
  assert.throws(() => backendVariant("ptx:drop-attention", false, false), /unknown variant drop-attention/);
});
