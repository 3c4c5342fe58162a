// The AMDGPU renderer without an AMD GPU: kernels rendered to LLVM IR and compiled by libamd_comgr to code
// objects for gfx90a and gfx942 (wave64) and gfx1100 (wave32); the code objects' own metadata (read back
// through comgr) must match what the ROCm device will pass: one 8-byte pointer per binding at 8-byte steps,
// the fault word's pointer last when the kernel has checks, the LDS the kernel declares, the target's wave
// size and the kernel's workgroup. Skips when libamd_comgr is not installed (CI installs libamd-comgr2).
//
// Never run on hardware: these code objects were compiled and inspected, not executed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { fma, type Kernel, KernelBuilder, KernelError, u32 } from "../../kernels/ir.ts";
import { ComgrError } from "../../ffi/comgr.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import { AmdCompiler, comgr } from "../../kernels/render/amdgpu/compile.ts";
import { AMD_TARGET_NAMES, AMD_TARGETS, type AmdTarget } from "../../kernels/render/amdgpu/targets.ts";
import { type AmdCodeObject, packKernargs } from "../../kernels/render/amdgpu/meta.ts";
import { type AmdgpuModule, renderAmdgpu } from "../../kernels/render/amdgpu/kernel.ts";
import { oneBPlan, type PlanKernel, storiesPlan } from "./plans.ts";
import { tiledMatmul } from "../../kernels/lib/tiled_matmul.ts";
import { amdCaps } from "../../kernels/render/amdgpu/targets.ts";
import { atomicKernel, checkCase, featureCases } from "../devices/feature_kernels.ts";

const cg = comgr();
const skip = typeof cg === "string" ? cg : false;
const C = typeof cg === "string" ? undefined : new AmdCompiler(cg);
const slow = { skip, timeout: 600_000 };
const TARGETS: AmdTarget[] = AMD_TARGET_NAMES.map((n) => AMD_TARGETS[n]);

/** What the device passes for `k` with `bindings` buffers, checked against the code object's metadata. */
function checkMeta(co: AmdCodeObject & { module: AmdgpuModule }, k: Kernel, bindings: number, t: AmdTarget): string[] {
  const m = co.meta, bad: string[] = [];
  const where = `${k.name} on ${t.name}`;
  const explicit = m.args.filter((a) => !a.kind.startsWith("hidden_"));
  const want = bindings + (co.module.faultParam ? 1 : 0);
  if (explicit.length !== want) bad.push(`${where}: ${explicit.length} explicit args, device passes ${want}`);
  explicit.forEach((a, i) => {
    const role = i < bindings ? i : "fault";
    if (a.offset !== 8 * i || a.size !== 8 || a.kind !== "global_buffer" || a.binding !== role) {
      bad.push(`${where}: arg ${i} is ${JSON.stringify(a)}, device writes an 8-byte pointer at ${8 * i}`);
    }
  });
  if (m.kernargSize < 8 * want) bad.push(`${where}: kernarg segment ${m.kernargSize} < ${8 * want}`);
  if (m.kernargAlign < 8) bad.push(`${where}: kernarg align ${m.kernargAlign}`);
  // The device launches with the code object's own group segment (backends/rocm/code.ts). LLVM may shrink an LDS
  // array of which only a constant prefix is used (last_block: 4 of the 16 bytes the renderer rounds each array
  // to), never grow it past what the kernel declares.
  if (m.groupSegmentSize > co.module.sharedBytes) {
    bad.push(`${where}: group segment ${m.groupSegmentSize}, kernel declares ${co.module.sharedBytes}`);
  }
  if (m.groupSegmentSize > t.ldsBytes) bad.push(`${where}: ${m.groupSegmentSize} B of LDS > ${t.ldsBytes}`);
  if (m.wavefrontSize !== t.wave) bad.push(`${where}: wavefront ${m.wavefrontSize}, target ${t.wave}`);
  if (m.workgroupSize.join() !== k.workgroup.join()) bad.push(`${where}: workgroup ${m.workgroupSize}, kernel ${k.workgroup}`);
  if (m.symbol !== `${co.module.entry}.kd`) bad.push(`${where}: symbol ${m.symbol}`);
  return bad;
}

function compilePlan(name: string, plan: (t: AmdTarget) => PlanKernel[]): void {
  const bad: string[] = [];
  const counts: string[] = [];
  const t0 = performance.now();
  for (const t of TARGETS) {
    const ks = plan(t);
    let scratch = 0;
    const mods = ks.map((pk) => ({ module: renderAmdgpu(pk.kernel, { wave: t.wave }), kernel: pk.kernel }));
    try {
      C!.compileMany(mods, t).forEach((co, i) => {
        bad.push(...checkMeta({ ...co, module: mods[i].module }, ks[i].kernel, ks[i].bindings, t));
        if (co.meta.privateSegmentSize > 0) scratch++;
      });
    } catch (e) {
      bad.push(`${name} on ${t.name}: ${(e as Error).message.split("\n").slice(0, 4).join(" | ")}`);
    }
    counts.push(`${t.name} ${ks.length} kernels (${ks.reduce((a, k) => a + k.dispatches, 0)} dispatches${scratch ? `, ${scratch} with scratch` : ""})`);
  }
  console.log(`amdgpu ${name}: ${counts.join("; ")} in ${((performance.now() - t0) / 1000).toFixed(1)} s; comgr ${JSON.stringify(C!.stats)}`);
  assert.deepEqual(bad, []);
}

test("every kernel of the stories260K decode plan compiles for gfx90a, gfx942, gfx1100 with matching metadata", slow, () => {
  compilePlan("stories260K decode", storiesPlan);
});

test("every kernel of the synthetic 1B decode plan (bf16, f16 K/V) compiles for gfx90a, gfx942, gfx1100 with matching metadata", slow, () => {
  compilePlan("llama-3.2-1b decode", (t) => oneBPlan(t));
});

// ~10 s of CPU that does not depend on the runtime: once, under Deno.
const quantSkip = skip || ("Bun" in globalThis ? "runs under Deno (same comgr, same text)" : false);
test("the 1B decode plan's quantized kernels (q8_0, q4_k_m mixes) compile for every target", { ...slow, skip: quantSkip }, () => {
  compilePlan("llama-3.2-1b q8_0/q4_k_m decode", (t) => {
    const seen = new Set<string>();
    return [...oneBPlan(t, "q8_0"), ...oneBPlan(t, "q4_k_m")].filter((pk) => !seen.has(pk.kernel.name) && !!seen.add(pk.kernel.name));
  });
});

test("the tiled matmul (f32, bf16, q8_0, q4_k, q6_k; bias, residual) compiles for every target with its LDS in the metadata", { ...slow, skip: quantSkip }, () => {
  compilePlan("tiled matmul", (t) => {
    const caps = amdCaps(t);
    return (["f32", "bf16", "q8_0", "q4_k", "q6_k"] as const).map((w, i) => {
      const kernel = tiledMatmul(caps, { n: 2048, k: 2048, batch: 512, w, bias: i % 2 === 0, residual: i % 2 === 1 });
      return { kernel, bindings: kernel.buffers.length, dispatches: 1 };
    });
  });
});

const features = [...featureCases(), checkCase(true)];
const single = typeof cg === "string" ? undefined! : new AmdCompiler(cg);

test(`IR feature kernels (${features.length}) compile for every target, alone and linked into one module`, slow, () => {
  const bad: string[] = [];
  for (const t of TARGETS) {
    const mods = features.map((c) => ({ module: renderAmdgpu(c.kernel, { wave: t.wave }), kernel: c.kernel }));
    const many = C!.compileMany(mods, t);
    const alone = single.compileMany(mods, t, 1);
    for (const [i, c] of features.entries()) {
      try {
        const co = C!.compile(c.kernel, t); // cached by the batch: the batch's metadata
        assert.equal(co.meta, many[i].meta);
        bad.push(...checkMeta(co, c.kernel, c.kernel.buffers.length, t));
        // the same kernel compiled alone has the same launch description
        if (alone[i].elf === many[i].elf) bad.push(`${c.name}: not compiled alone`);
        if (JSON.stringify(alone[i].meta) !== JSON.stringify(co.meta)) bad.push(`${c.name} on ${t.name}: alone ${JSON.stringify(alone[i].meta)} vs linked ${JSON.stringify(co.meta)}`);
      } catch (e) {
        bad.push(`${c.name} on ${t.name}: ${(e as Error).message.split("\n").slice(0, 4).join(" | ")}`);
      }
    }
  }
  assert.deepEqual(bad, []);
});

/** The assembly of `k` on `t` (comgr's disassembly, or its codegen where the ISA table lacks the target). */
function asm(k: Kernel, t: AmdTarget): string {
  const co = C!.compile(k, t);
  return C!.assembly(co, co.module, t);
}

test("a failing check stores its code to the fault word and traps (s_trap), on every target", { skip }, () => {
  const k = checkCase(true).kernel;
  for (const t of TARGETS) {
    const co = C!.compile(k, t);
    assert.equal(co.module.faultParam, true);
    assert.match(co.module.ll, /store volatile i32 \d+, ptr addrspace\(1\) %fault/);
    const s = asm(k, t);
    assert.match(s, /s_trap 2/, `${t.name}: no s_trap`);
    assert.equal(co.meta.args.at(-1)?.binding ?? co.meta.args.filter((a) => a.binding !== undefined).at(-1)?.binding, "fault");
  }
});

test("atomic and/or on u32 words are device-scope atomicrmw and compile to global atomics, on every target", { skip }, () => {
  const k = atomicKernel();
  for (const t of TARGETS) {
    const co = C!.compile(k, t);
    assert.match(co.module.ll, /atomicrmw and ptr addrspace\(1\)/);
    assert.match(co.module.ll, /atomicrmw or ptr addrspace\(1\)/);
    assert.match(asm(k, t), /global_atomic_and/, `${t.name}: no global_atomic_and`);
  }
});

test("f32 a*b+c stays a rounded multiply and a rounded add; fma stays one fused op", { skip }, () => {
  const b = new KernelBuilder("no_contract", { workgroup: 64, grid: 1 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w");
  const i = b.gid.x;
  const a = b.load(x, i), c = b.load(x, i.add(u32(64)));
  b.store(y, i, a.mul(c).add(a));
  b.store(y, i.add(u32(64)), fma(a, c, a));
  const k = b.build();
  for (const t of TARGETS) {
    const s = asm(k, t);
    assert.match(s, /v_mul_f32/, `${t.name}: no v_mul_f32`);
    assert.match(s, /v_add_f32/, `${t.name}: no v_add_f32`);
    assert.equal((s.match(/v_(fma|fmac|mad|mac)\w*_f32/g) ?? []).length, 1, `${t.name}: exactly the one fma`);
  }
});

test("subgroup reductions and shuffles use ds_bpermute at the target's wave size (64, 64, 32)", { skip }, () => {
  const b = new KernelBuilder("waves", { workgroup: 128, grid: 2 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w"), z = b.buffer("z", "u32", "w");
  const i = b.gid.x;
  const v = b.load(x, i);
  b.store(y, i, b.subgroupReduce("max", v).add(b.shuffle("xor", v, 1)));
  b.store(z, i, b.builtin("sgsize").add(b.builtin("lane")));
  const k = b.build();
  for (const t of TARGETS) {
    const co = C!.compile(k, t);
    assert.equal(co.meta.wavefrontSize, t.wave);
    // the butterfly's first partner is wave/2 lanes away: lane ^ 32 on wave64, lane ^ 16 on wave32
    assert.match(co.module.ll, new RegExp(`xor i32 %t\\d+, ${t.wave / 2}\\b`));
    assert.doesNotMatch(co.module.ll, new RegExp(`xor i32 %t\\d+, ${t.wave}\\b`));
    assert.match(asm(k, t), /ds_bpermute_b32/);
  }
});

test("compiles are cached per (target, text): a second plan compile costs no comgr call", { skip }, () => {
  const k = features[0].kernel;
  C!.compile(k, AMD_TARGETS.gfx90a);
  const before = C!.stats.compiles;
  C!.compile(k, AMD_TARGETS.gfx90a);
  assert.equal(C!.stats.compiles, before);
  C!.compile(k, AMD_TARGETS.gfx1100);
  assert.ok(C!.stats.compiles <= before + 1);
});

test("packKernargs writes each binding's address and the fault word's at the metadata's offsets", { skip }, () => {
  const k = checkCase(true).kernel; // two bindings and checks
  const co = C!.compile(k, AMD_TARGETS.gfx90a);
  const bytes = packKernargs(co.meta, [0x1000n, 0x2000n], 0x3000n);
  assert.equal(bytes.byteLength, co.meta.kernargSize);
  const dv = new DataView(bytes.buffer);
  assert.equal(dv.getBigUint64(0, true), 0x1000n);
  assert.equal(dv.getBigUint64(8, true), 0x2000n);
  assert.equal(dv.getBigUint64(16, true), 0x3000n);
  assert.throws(() => packKernargs(co.meta, [0x1000n], 0x3000n), /1 bindings given|binding 1 not given/);
  assert.throws(() => packKernargs(co.meta, [0x1000n, 0x2000n]), /fault word/);
});

test("what the targets cannot run is a typed error: MMA kernels, odd wave sizes, text comgr rejects", { skip }, () => {
  const b = new KernelBuilder("uses_mma", { workgroup: 32, grid: 1 });
  const y = b.buffer("y", "f32", "w");
  const w = b.pack2("bf16", b.load(y, 0), b.load(y, 1));
  const d = b.mma("bf16", [w, w, w, w], [w, w], [b.load(y, 2), b.load(y, 3), b.load(y, 4), b.load(y, 5)]);
  b.store(y, 0, d[0]);
  assert.throws(() => renderAmdgpu(b.build(), { wave: 64 }), (e) => e instanceof KernelError && /mma/.test(e.message));
  const plain = features[0].kernel;
  assert.throws(() => RENDERERS.amdgpu.render(plain, { ...RENDERERS.amdgpu.caps, subgroupSize: 16 }), (e) => e instanceof KernelError && /16/.test(e.message));
  const m = renderAmdgpu(plain, { wave: 64 });
  const broken = { ...m, ll: m.ll.replace("ret void", "ret i32 0") };
  assert.throws(() => C!.compileModule(broken, plain, AMD_TARGETS.gfx90a), (e) => e instanceof ComgrError && /ret/.test(e.message));
});
