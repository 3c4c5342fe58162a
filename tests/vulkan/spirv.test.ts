// The SPIR-V renderer without a device: every feature kernel and every kernel-library case renders under
// several capability sets, and spirv-val (when installed) accepts each module for Vulkan 1.1 and 1.3.
// What a target lacks is refused with a KernelError.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KernelBuilder, KernelError, u32 } from "../../kernels/ir.ts";
import type { Caps } from "../../kernels/target.ts";
import { renderSpirv } from "../../kernels/render/spirv.ts";
import { Cap, Op } from "../../kernels/render/spirv/spec.ts";
import { cases } from "../kernels/cases.ts";
import type { TargetSet } from "../../kernels/target.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { type LlamaConfig, traceDecode, traceStep } from "../../llm/families/llama.ts";
import { features } from "../devices/features.ts";
import { dot4Case } from "../devices/feature_kernels.ts";
import { gemv } from "../../kernels/lib/gemv.ts";

/**
 * lavapipe's capabilities (integer dot products included), and the same target without 16/8-bit storage, and a
 * bare Vulkan 1.1 device (no integer dot product: dot4 decomposed).
 */
const FULL: Caps = {
  subgroups: true, subgroupSize: 8, f16: true, storage16: true, storage8: true, trap: false, maxWorkgroupSize: 1024,
  maxWorkgroupsPerDim: [65535, 65535, 65535], maxSharedBytes: 32768, maxBindingBytes: 1 << 27, bindingAlign: 16, dispatchGap: true,
  dot4Native: true,
};
const WORDS: Caps = { ...FULL, storage16: false, storage8: false, subgroupSize: 32 };
const BARE: Caps = { ...WORDS, subgroups: false, subgroupSize: 0, f16: false, dot4Native: false };
const VARIANTS: [string, Caps][] = [["full", FULL], ["words", WORDS], ["bare", BARE]];

function hasTool(name: string): boolean {
  try {
    execFileSync(name, ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}
const noVal = hasTool("spirv-val") ? false : "spirv-val is not installed";
const dir = mkdtempSync(join(tmpdir(), "poot-spirv-"));
let nfile = 0;

/** Runs spirv-val on the words; returns its complaint, or "" when valid. */
function validate(words: Uint32Array, env: "vulkan1.1" | "vulkan1.3"): string {
  const f = join(dir, `k${nfile++}.spv`);
  writeFileSync(f, new Uint8Array(words.buffer, words.byteOffset, words.byteLength));
  try {
    execFileSync("spirv-val", ["--target-env", env, f], { stdio: "pipe" });
    return "";
  } catch (e) {
    const err = e as { stderr?: Uint8Array; stdout?: Uint8Array };
    return `${new TextDecoder().decode(err.stderr ?? new Uint8Array())}${new TextDecoder().decode(err.stdout ?? new Uint8Array())}`;
  } finally {
    rmSync(f);
  }
}

for (const [label, caps] of VARIANTS) {
  for (const f of features) {
    const k = f.make(caps);
    if (typeof k === "string") continue; // the caps cannot express it (checked below that the renderer refuses)
    test(`spirv ${label}: ${f.name} renders and validates`, { skip: noVal, timeout: 120_000 }, () => {
      const shader = renderSpirv(k, caps);
      assert.equal(shader.words[0], 0x07230203);
      for (const env of label === "full" ? ["vulkan1.1", "vulkan1.3"] as const : ["vulkan1.1"] as const) {
        const err = validate(shader.words, env);
        assert.equal(err, "", `${f.name} (${label}, ${env}):\n${err}`);
      }
    });
  }
}

/** spirv-val on many modules, a few processes at a time (one spirv-val start costs more than its work). */
async function validateAll(items: { name: string; words: Uint32Array }[]): Promise<string[]> {
  const bad: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const it = items[next++];
      const f = join(dir, `m${nfile++}.spv`);
      writeFileSync(f, new Uint8Array(it.words.buffer, it.words.byteOffset, it.words.byteLength));
      await new Promise<void>((done) => {
        execFile("spirv-val", ["--target-env", "vulkan1.1", f], (err, stdout, stderr) => {
          if (err) bad.push(`${it.name}: ${String(stderr || stdout || err.message).split("\n")[0]}`);
          rmSync(f, { force: true });
          done();
        });
      });
    }
  };
  await Promise.all([worker(), worker(), worker(), worker()]);
  return bad;
}

for (const [label, caps] of VARIANTS.slice(0, 2)) {
  test(`spirv ${label}: every kernel-library case validates`, { skip: noVal, timeout: 120_000 }, async () => {
    // identical modules (cases that differ only in their data) are validated once
    const seen = new Set<string>();
    const items = cases.map((kc) => ({ name: kc.name, words: renderSpirv(kc.make(caps), caps).words })).filter((it) => {
      const key = it.words.join(",");
      return !seen.has(key) && !!seen.add(key);
    });
    const bad = await validateAll(items);
    assert.deepEqual(bad, [], bad.join("\n"));
  });
}

// The bench shapes (matmul weights bf16) and the shipped stories260K shape, planned for an NVIDIA-like Vulkan
// target (subgroups of 32, 4 GiB bindings) and, for stories260K, for lavapipe itself.
const SHAPES: Record<string, LlamaConfig> = {
  "llama-3.2-1b": { dim: 2048, hidden: 8192, layers: 16, heads: 32, kvHeads: 8, headDim: 64, vocab: 128256, rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: true },
  "qwen2.5-0.5b": { dim: 896, hidden: 4864, layers: 24, heads: 14, kvHeads: 2, headDim: 64, vocab: 151936, rmsEps: 1e-6, ropeTheta: 1000000, ropeStyle: "half", tiedEmbeddings: true, qkvBias: true },
  "llama-3-8b": { dim: 4096, hidden: 14336, layers: 32, heads: 32, kvHeads: 8, headDim: 128, vocab: 128256, rmsEps: 1e-5, ropeTheta: 500000, ropeStyle: "half", tiedEmbeddings: false },
  "stories260K": { dim: 64, hidden: 172, layers: 5, heads: 8, kvHeads: 4, headDim: 8, vocab: 512, rmsEps: 1e-5, ropeTheta: 10000, ropeStyle: "adjacent", tiedEmbeddings: true },
};
const NV: Caps = { ...FULL, subgroupSize: 32, maxBindingBytes: 2 ** 32 - 1, maxSharedBytes: 49152, dot4: true };

test("spirv: every kernel of the Llama decode and prefill plans validates", { skip: noVal, timeout: 120_000 }, async () => {
  const items = new Map<string, { name: string; words: Uint32Array }>();
  const counts: string[] = [];
  const targets: [string, Caps, string[]][] = [["nvidia-like", NV, Object.keys(SHAPES)], ["lavapipe", FULL, ["stories260K"]]];
  for (const [tname, caps, shapes] of targets) {
    const target: TargetSet = { backend: "vulkan", device: tname, caps, memory: { totalBytes: 141e9 }, watchdogBudget: 0 };
    for (const name of shapes) {
      const cfg = SHAPES[name];
      const bf16 = name !== "stories260K";
      const dtypeOf = (r: { role: string }) => (bf16 && !r.role.endsWith("norm") && r.role !== "tok_embd" && !r.role.endsWith(".bias") ? "bf16" : "f32");
      for (const [kind, g] of [
        ["decode", traceDecode(cfg, { cap: 2048 }, { dtypeOf })],
        ["prefill", traceStep(cfg, { cap: 2048, rows: 7 }, { dtypeOf })],
      ] as const) {
        const prog = compileGraph(g, target);
        const seen = new Set<string>();
        let n = 0;
        for (const st of prog.steps) {
          if (st.k !== "kernel") continue;
          n++;
          if (seen.has(st.kernel.name)) continue; // names spell out shapes and types
          seen.add(st.kernel.name);
          const words = renderSpirv(st.kernel, caps).words;
          items.set(words.join(","), { name: `${tname} ${name} ${kind}: ${st.kernel.name}`, words });
        }
        counts.push(`${tname} ${name} ${kind}: ${n} dispatches`);
      }
    }
  }
  assert.ok(items.size > 20, `only ${items.size} distinct kernels`);
  const bad = await validateAll([...items.values()]);
  assert.deepEqual(bad, [], bad.join("\n"));
  console.log(`spirv: ${items.size} distinct plan kernels validated (${counts.join("; ")})`);
});

test("spirv: bindings are the kernel's buffers, then the error word only when it has checks", () => {
  const planted = features.find((f) => f.fault !== undefined)!.make(FULL);
  assert.ok(typeof planted !== "string");
  const s = renderSpirv(planted, FULL);
  assert.equal(s.errorBinding, planted.buffers.length);
  assert.equal(s.bindings, planted.buffers.length + 1);
  const plain = features[0].make(FULL) as Exclude<ReturnType<(typeof features)[0]["make"]>, string>;
  const p = renderSpirv(plain, FULL);
  assert.equal(p.errorBinding, undefined);
  assert.equal(p.bindings, plain.buffers.length);
  assert.equal(p.entry, "main");
});

test("spirv: rendering is deterministic and the word path needs no 16/8-bit storage", () => {
  const narrow = features.find((f) => f.name.startsWith("16/8-bit"))!.make(FULL);
  assert.ok(typeof narrow !== "string");
  assert.deepEqual(renderSpirv(narrow, FULL).words, renderSpirv(narrow, FULL).words);
  const full = renderSpirv(narrow, FULL), words = renderSpirv(narrow, WORDS);
  assert.equal(full.needs.storage16 && full.needs.storage8, true);
  assert.equal(words.needs.storage16 || words.needs.storage8, false);
  const forced = renderSpirv(narrow, FULL, { storage16: false, storage8: false });
  assert.equal(forced.needs.storage16 || forced.needs.storage8, false);
});

test("spirv: what the target lacks is refused with a KernelError", () => {
  for (const f of features) {
    const k = f.make(FULL);
    if (typeof k === "string" || typeof f.make(BARE) !== "string") continue;
    assert.throws(() => renderSpirv(k, BARE), KernelError, `${f.name} on a bare target`);
  }
  const big = new KernelBuilder("big", { workgroup: 2048, grid: 1 });
  big.store(big.buffer("o", "u32", "w"), big.gid.x, u32(1));
  assert.throws(() => renderSpirv(big.build(), FULL), /workgroup/);
  const sh = new KernelBuilder("sh", { workgroup: 1, grid: 1 });
  const mem = sh.shared("s", "f32", 16384);
  sh.sstore(mem, 0, 1.5);
  assert.throws(() => renderSpirv(sh.build(), FULL), /shared memory/);
});

/** The opcodes a module's instructions use. */
function opcodes(words: Uint32Array): Set<number> {
  const ops = new Set<number>();
  for (let i = 5; i < words.length; i += words[i] >>> 16) ops.add(words[i] & 0xffff);
  return ops;
}

test("spirv: signed / and % never use OpSDiv, OpSRem or OpSMod (undefined for negative operands on Vulkan)", () => {
  // Vulkan's SPIR-V environment leaves OpSRem / OpSMod undefined when an operand is negative (NVIDIA computes
  // them unsigned: -19 % 3 gave 0) and OpSDiv undefined for INT_MIN / -1: i32 goes through OpUDiv / OpUMod.
  const k = new KernelBuilder("idiv", { workgroup: 64, grid: 1 });
  const a = k.buffer("a", "i32", "r"), b = k.buffer("b", "i32", "r"), o = k.buffer("o", "i32", "w");
  const x = k.let(k.load(a, k.gid.x)), y = k.let(k.load(b, k.gid.x));
  [x.div(y), x.mod(y), x.div(7), x.mod(-5), x.div(-3)].forEach((v, j) => k.store(o, k.gid.x.add(j * 64), v));
  const ops = opcodes(renderSpirv(k.build(), FULL).words);
  assert.ok(ops.has(Op.UDiv) && ops.has(Op.UMod));
  const FORBIDDEN = [Op.SDiv, Op.SRem, Op.SMod];
  const bad: string[] = [];
  for (const [label, caps] of VARIANTS.slice(0, 2)) {
    const kernels = [
      ...features.map((f) => ({ name: f.name, k: f.make(caps) })),
      ...cases.map((kc) => ({ name: kc.name, k: kc.make(caps) })),
      { name: "idiv", k: k.build() },
    ];
    for (const { name, k } of kernels) {
      if (typeof k === "string") continue;
      const used = opcodes(renderSpirv(k, caps).words);
      if (FORBIDDEN.some((op) => used.has(op))) bad.push(`${label} ${name}`);
    }
  }
  assert.deepEqual(bad, []);
});

test("spirv: dot4 is OpSDotKHR (packed 4x8) with dot4Native, byte products without; both validate", { skip: noVal }, () => {
  const k = dot4Case().kernel;
  const native = renderSpirv(k, FULL), bare = renderSpirv(k, BARE);
  const ops = opcodes(native.words);
  assert.ok(ops.has(Op.SDot), "OpSDot emitted");
  assert.equal(native.needs.dotProduct, true);
  // OpCapability DotProduct, DotProductInput4x8BitPacked and the extension's name are in the module's head
  const caps = new Set<number>();
  for (let i = 5; i < native.words.length && (native.words[i] & 0xffff) === Op.Capability; i += 2) caps.add(native.words[i + 1]);
  assert.ok(caps.has(Cap.DotProduct) && caps.has(Cap.DotProductInput4x8BitPacked), `capabilities ${[...caps]}`);
  assert.ok(new TextDecoder().decode(native.words).includes("SPV_KHR_integer_dot_product"));
  assert.ok(!opcodes(bare.words).has(Op.SDot), "no OpSDot without dot4Native");
  assert.equal(bare.needs.dotProduct, false);
  for (const env of ["vulkan1.1", "vulkan1.3"] as const) {
    assert.equal(validate(native.words, env), "", `native dot4 (${env})`);
    assert.equal(validate(bare.words, env), "", `decomposed dot4 (${env})`);
  }
});

test("spirv: restrictReads decorates exactly the read-only bindings Restrict, and validates", { skip: noVal }, () => {
  const k = dot4Case().kernel;
  const plain = renderSpirv(k, FULL), restrict = renderSpirv(k, FULL, { restrictReads: true });
  // OpDecorate (opcode 71, 3 words) <target> Restrict (19)
  const restricted = (w: Uint32Array) => {
    let n = 0;
    for (let i = 5; i < w.length; i += w[i] >>> 16) if ((w[i] & 0xffff) === 71 && w[i] >>> 16 === 3 && w[i + 2] === 19) n++;
    return n;
  };
  assert.equal(restricted(plain.words), 0, "none by default");
  const reads = k.buffers.filter((b) => b.access === "r").length;
  assert.ok(reads > 0 && reads < k.buffers.length, "the case has read-only and written bindings");
  assert.equal(restricted(restrict.words), reads);
  assert.equal(validate(restrict.words, "vulkan1.1"), "");
});

const hintShape = { k: 512, w: "bf16" as const, parts: [{ n: 64 }] };
test("spirv: a float gemv's weight loads are Nontemporal (Buffer.reads once), none without hints", () => {
  // OpLoad (opcode 61): 4 words, or 5 with a memory-operand mask (Nontemporal = 0x4)
  const loads = (w: Uint32Array) => {
    let plain = 0, nontemporal = 0;
    for (let i = 5; i < w.length; i += w[i] >>> 16) {
      if ((w[i] & 0xffff) !== 61) continue;
      if (w[i] >>> 16 === 5 && w[i + 4] === 0x4) nontemporal++;
      else plain++;
    }
    return { plain, nontemporal };
  };
  const on = renderSpirv(gemv(FULL, hintShape), FULL), off = renderSpirv(gemv(FULL, { ...hintShape, hints: false }), FULL);
  assert.ok(loads(on.words).nontemporal > 0 && loads(on.words).plain > 0, JSON.stringify(loads(on.words)));
  assert.equal(loads(off.words).nontemporal, 0);
});

test("spirv: a gemv with Nontemporal loads validates", { skip: noVal }, () => {
  assert.equal(validate(renderSpirv(gemv(FULL, hintShape), FULL).words, "vulkan1.1"), "");
});

test("spirv: cleanup", () => rmSync(dir, { recursive: true, force: true }));
