// x quantized once per gemv (CompileOptions.xqPrep: kernels/lib/xq_prep.ts writes x·g as int8 runs, their
// scales and sums, and the norm's r; the gemv reads them) against the in-kernel quantization it replaces: every
// quantized-x op case (tests/ops/quant_cases.ts: each XQ type; plain, wide (2 chunks a lane), crafted blocks, NaN
// and ±Inf in x, rmsnorm + q/k/v with rope and the f16 cache write, rmsnorm + gate/up silu_mul, down + residual)
// gives the same outputs and states bit for bit (a NaN as a NaN), and within the oracle's bound. On the JS
// device (one-lane teams), JS devices with 8- and 32-lane subgroups and without subgroups, and each GPU present, at the default tuning
// and a forced one (teams of several subgroups: Σx² meets through shared memory; 3 row units, the last team
// partial: every case on the one-lane JS device; elsewhere the cases whose team shape it changes: the fused norms'
// r and the 2048-wide runs; on lavapipe, where neither is a default, the vulkan and wgpu backends deal the cases). WGSL on a GPU may contract float code differently in two kernels: there the oracle's bound only. The
// numerics do not depend on the runtime: under Bun (whose JS device is several times slower) the subgroup JS
// devices are left to Deno. Then the decode plans: where the prep is taken (every target with an int8 dot), what
// takes its place (ptx: the combine's prep; Vulkan/WebGPU: the fused attention's prepared output, whose bits
// tests/kernels/attention_split.test.ts checks), and which barriers a layer's two preps need.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { barriersBefore, type StepAccess } from "../../kernels/hazards.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { evaluate } from "../../graph/eval.ts";
import { type Storage, storageFromBytes } from "../../graph/dtype.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import type { Program } from "../../kernels/program.ts";
import { type Caps, JS_CAPS } from "../../kernels/target.ts";
import type { GemvTune, Team } from "../../kernels/lib/mod.ts";
import { xqLayout, xqPrep, xqPrepCombines } from "../../kernels/lib/xq_prep.ts";
import { attentionCombine } from "../../kernels/lib/attention_combine.ts";
import { targetFor } from "../../cli/render.ts";
import { SHAPES } from "../../bench/shapes.ts";
import { familyOf } from "../../llm/registry.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { runKernel } from "../kernels/harness.ts";
import { openDevice, selectedBackends, slowDevice, softwareShare, softwareVulkan } from "../devices/index.ts";
import { opCases } from "../ops/cases.ts";
import { loadCaseWeights } from "../ops/load.ts";
import { QTYPES } from "../ops/quant_cases.ts";

const cases = opCases().filter((c) => c.name.includes("quantized x"));
const sg = (lanes: number): Caps => ({ ...JS_CAPS, subgroupSize: lanes, maxWorkgroupSize: 8 * lanes });
const gpus = selectedBackends().filter((b) => b !== "js");
const bun = "Bun" in globalThis;
const devices: [string, Device | string][] = [
  ["js", await openDevice("js")],
  ["js sg8", bun ? "left to Deno (the same numerics; Bun's JS device is slower)" : new JsDevice({ debug: true, caps: sg(8) })],
  ["js sg32", bun ? "left to Deno (the same numerics; Bun's JS device is slower)" : new JsDevice({ debug: true, caps: sg(32) })],
  // no subgroups (WebGPU without them): teams reduce through a shared-memory tree
  ["js shared", bun ? "left to Deno (the same numerics; Bun's JS device is slower)" : new JsDevice({ debug: true, caps: { ...JS_CAPS, subgroups: false, maxWorkgroupSize: 256 } })],
  ...await Promise.all(gpus.map(async (n): Promise<[string, Device | string]> => [n, await openDevice(n)])),
];
const TUNES: (Partial<GemvTune> | undefined)[] = [undefined, { lanes: 64, rows: 3 }];

/** Same bits, or both NaN (a NaN's payload is the device's). */
function sameBits(d: string, a: Uint8Array, b: Uint8Array): string | undefined {
  if (a.length !== b.length) return `${a.length} against ${b.length} bytes`;
  const x = storageFromBytes(d as "f32", a), y = storageFromBytes(d as "f32", b);
  for (let i = 0; i < x.length; i++) {
    const nan = Number.isNaN(x[i]) && Number.isNaN(y[i]);
    if (!nan && !Object.is(x[i], y[i])) return `element ${i}: ${x[i]} in kernel, ${y[i]} prepared`;
  }
  if (!(d === "f32" || d === "f16" || d === "bf16") && a.join() !== b.join()) return "bytes differ";
}

test("xqPrep \"no-norm\": a prep for the gemvs without a fused norm only", () => {
  const c = cases.find((c) => c.name.includes("q4_k: rmsnorm + gate/up silu_mul, down + residual"))!;
  const target = { backend: "js" as const, device: "js", caps: JS_CAPS, memory: { totalBytes: 1e9 }, watchdogBudget: 0 };
  // (siblings off: this case's down reads a slot of its own, so its prep would share the gate/up's launch)
  const names = (xqPrep: boolean | "no-norm") => compileGraph(c.graph, target, { xqPrep, siblings: false }).steps.flatMap((s) => (s.k === "kernel" && /gemv|xq_prep/.test(s.kernel.name) ? [s.kernel.name.replace(/_l\d.*$/, "")] : []));
  assert.deepEqual(names(true), ["xq_prep_q4_k_k256_norm", "gemv_q4_kx8p_k256_norm_sm512", "xq_prep_q4_k_k512", "gemv_q4_kx8p_k512_n256r"]);
  assert.deepEqual(names("no-norm"), ["gemv_q4_kx8_k256_norm_sm512", "xq_prep_q4_k_k512", "gemv_q4_kx8p_k512_n256r"]);
  assert.deepEqual(names(false), ["gemv_q4_kx8_k256_norm_sm512", "gemv_q4_kx8_k512_n256r"]);
});

test("the op cases cover every XQ type with norm, rope, cache write, silu_mul and residual parts", () => {
  for (const t of QTYPES) {
    const mine = cases.filter((c) => c.name.includes(` ${t}`));
    assert.ok(mine.some((c) => c.name.includes("rmsnorm + q/k/v, rope, f16 cache write")), t);
    assert.ok(mine.some((c) => c.name.includes("gate/up silu_mul, down + residual")), t);
    assert.ok(mine.some((c) => c.name.includes("NaN")), t);
    assert.ok(mine.length >= 6, `${t}: ${mine.length} cases`);
  }
});

for (const [tag, dev] of devices) {
  const heavy = typeof dev === "string" ? false : slowDevice(dev);
  const skip = typeof dev === "string" ? dev : heavy;
  const bitwise = typeof dev === "string" || dev.target.backend !== "wgpu" || softwareVulkan(dev);
  for (const tune of TUNES) {
    const what = tune ? `tune ${JSON.stringify(tune)}` : "default tuning";
    // Off the one-lane JS device the forced tuning takes the cases it changes, and of the 32-value types the one
    // each family's variants (q4_1, q5_0, q5_1: an offset, a min, a fifth bit) share their team code with: a tuning
    // moves lanes and rows, which no block layout's decoding sees (the default tuning runs them all everywhere).
    // On lavapipe the vulkan and wgpu backends take alternate ones of those, and of the default tuning's cases too:
    // a CPU device takes neither quantized x nor its prep by default (caps.dot4 false), so both are forced variants
    // there (tests/devices/index.ts softwareShare); each case still runs through one of the two renderers.
    const changed = cases.filter((c) => /rmsnorm|1x21x2048/.test(c.name) && !/q4_1|q5_0|q5_1/.test(c.name));
    const mine = softwareShare(dev, tune && tag !== "js" ? changed : cases);
    test(`${tag}, ${what}: ${mine.length} quantized-x cases, x prepared == quantized in the kernel${bitwise ? " bit for bit" : ""}, both within the oracle's bound`, { skip, timeout: 900_000 }, async () => {
      const d = dev as Device;
      let prep = false, last: Program | undefined;
      const eng = new Engine(d, {
        compile: (g, t) => (last = compileGraph(g, t, { quantizedX: false, xqPrep: prep, gemvTune: tune })),
        timeoutMs: 120_000, ownsDevice: false,
      });
      const bad: string[] = [];
      try {
        for (const c of mine) {
          try {
            assert.equal(c.steps ?? 1, 1, "one step");
            const consts = await loadCaseWeights(eng, c);
            const want = evaluate(c.graph, { consts, slots: c.slots, state: {} }, { bounds: c.bounds ?? "worst" });
            const runs: Record<string, Uint8Array>[] = [];
            for (const p of [false, true]) {
              prep = p;
              eng.resetState();
              const id = eng.addEntry(`xq-prep:${p}:${c.name}`, c.graph);
              const names = last!.steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : []));
              // the path under test is the one that ran
              assert.equal(names.some((n) => n.startsWith("xq_prep_")), p, `${c.name}: prep kernels ${p}: ${names.join(", ")}`);
              assert.ok(names.some((n) => /^gemv_q\d_[0-9k]x8/.test(n)), `${c.name}: an int-path gemv`);
              const got = await eng.step(id, c.slots as Record<string, Storage>);
              const out: Record<string, Uint8Array> = {};
              for (const [name, x] of Object.entries(want.output)) {
                const dt = c.graph.nodes[c.graph.outputs[name]].dtype;
                assertClose(`${c.name} ${name} (prep ${p})`, dt, got.outputs[name] as Storage, x, want.bounds!.output[name]);
                const v = got.outputs[name];
                out[name] = new Uint8Array(v.buffer.slice(v.byteOffset, v.byteOffset + v.byteLength));
              }
              for (const [name, x] of Object.entries(want.state)) {
                const dt = c.graph.states[name].dtype, bytes = await eng.readState(name);
                assertClose(`${c.name} state ${name} (prep ${p})`, dt, storageFromBytes(dt, bytes), x, want.bounds!.state[name]);
                out[`state ${name}`] = bytes.slice();
              }
              eng.removeEntry(id);
              runs.push(out);
            }
            if (bitwise) {
              for (const key of Object.keys(runs[0])) {
                const dt = key.startsWith("state ") ? c.graph.states[key.slice(6)].dtype : c.graph.nodes[c.graph.outputs[key]].dtype;
                const diff = sameBits(dt, runs[0][key], runs[1][key]);
                if (diff) bad.push(`${c.name} ${key}: ${diff}`);
              }
            }
          } catch (e) {
            bad.push(`${c.name}: ${(e as Error).message.split("\n")[0]}`);
            if (d.poisoned) break;
          }
        }
      } finally {
        await eng.unload();
      }
      assert.deepEqual(bad, []);
    });
  }
}

// The prep's two shapes (an invocation per word where subgroups allow, else per run) against each other, bit for
// bit, at model widths (k past one workgroup of words, and a partial one) and the team shapes a gemv takes (Σx²'s
// order follows its lanes): x with magnitudes over 16 binades, so that a sum in another order would differ.
// The JS devices take every width; a GPU's renderer sees the same kernel with other constants at each, so it takes
// 2304 alone: 576 words, past one workgroup, and the last of the no-norm prep's workgroups of 128 partial. On
// lavapipe the vulkan and wgpu backends deal the norm's team shapes between them (tests/devices/index.ts softwareShare).
const WIDTHS = [2304, 4096, 8192];
for (const [tag, dev] of devices) {
  const skip = typeof dev === "string" ? dev : !dev.target.caps.subgroups || dev.target.caps.subgroupSize < 8 ? "no subgroups of 8 lanes or more: the per-run prep only" : slowDevice(dev);
  const widths = tag.startsWith("js") ? WIDTHS : WIDTHS.slice(0, 1);
  test(`${tag}: the per-word prep writes the per-run prep's words, sums, scales and r bit for bit (k ${widths.join(", ")})`, { skip, timeout: 600_000 }, async () => {
    const d = dev as Device, caps = d.target.caps, sg = caps.subgroupSize;
    // the no-norm prep, then the team shapes a gemv with a norm takes (on lavapipe dealt between vulkan and wgpu)
    const teams: (Team | undefined)[] = [undefined, ...softwareShare(d, [{ lanes: 2 * sg, rows: 1, size: 2 * sg, shared: false, sgs: 2 }, { lanes: sg, rows: 1, size: sg, shared: false, sgs: 1 }, { lanes: 4 * sg, rows: 1, size: 4 * sg, shared: false, sgs: 4 }])];
    const bad: string[] = [];
    let seed = 7;
    const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    for (const k of widths) {
      const x = Float32Array.from({ length: k }, () => (rnd() - 0.5) * 2 ** Math.floor(rnd() * 16 - 8));
      const g = Float32Array.from({ length: k }, () => 0.5 + rnd());
      for (const w of QTYPES) {
        for (const team of teams) {
          const shape = { k, w, team, norm: team ? { eps: 1e-5, weight: "f32" as const } : undefined };
          const total = xqLayout(w, k, !!team).total;
          const run = (perWord: boolean) => {
            const kern = xqPrep(caps, { ...shape, perWord });
            const ins = [new Uint8Array(x.buffer.slice(0)), ...(team ? [new Uint8Array(g.buffer.slice(0))] : []), new Uint8Array(4 * total)];
            return runKernel(d, kern, ins).then((o) => ({ name: kern.name, words: new Uint32Array(o[o.length - 1].buffer.slice(0, 4 * total)) }));
          };
          const [a, b] = [await run(false), await run(true)];
          const i = a.words.findIndex((v, j) => v !== b.words[j]);
          if (i >= 0) bad.push(`${a.name} (team ${team?.lanes ?? "-"}): word ${i} of ${total}: ${a.words[i]} per run, ${b.words[i]} per word`);
        }
      }
    }
    assert.deepEqual(bad, []);
  });
}

// The o projection's prep with the split-K attention's combine in it (XqPrepShape.combine) against the combine
// kernel then the plain prep, bit for bit: every XQ type the width allows, the decode shapes' heads x hd x splits
// (the 8B's, qwen2.5-0.5b's) and a small one, partials with empty splits (m = -inf, l = 0, acc = 0) past a
// random live count per item and values over 16 binades. Where both run (ptx plans fold it by default:
// CompileOptions.combinePrep) tests/quant/xq_tokens.test.ts holds the tokens to llama.cpp's.
const COMBINES = [{ heads: 32, hd: 128, splits: 32 }, { heads: 14, hd: 64, splits: 32 }, { heads: 4, hd: 64, splits: 5 }];
for (const [tag, dev] of devices) {
  const skip = typeof dev === "string" ? dev : !dev.target.caps.subgroups || dev.target.caps.subgroupSize < 32 ? "no subgroups of 32 lanes: a run's 16-32 values do not fit one (no fold there)"
    : dev.target.backend === "wgpu" && !softwareVulkan(dev) ? "WGSL on a GPU may contract the combine's float code differently in two kernels (and wgpu plans do not fold it)"
    : slowDevice(dev);
  test(`${tag}: the prep that combines attention partials writes the combine-then-prep words bit for bit`, { skip, timeout: 600_000 }, async () => {
    const d = dev as Device, caps = d.target.caps;
    const bad: string[] = [];
    let seed = 11, tried = 0;
    const rnd = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
    for (const s of COMBINES) {
      const k = s.heads * s.hd, stride = s.hd + 2;
      const part = new Float32Array(s.heads * s.splits * stride);
      for (let it = 0; it < s.heads; it++) {
        const live = 1 + Math.floor(rnd() * s.splits);
        for (let sp = 0; sp < s.splits; sp++) {
          const at = (it * s.splits + sp) * stride;
          if (sp >= live) {
            part[at] = -Infinity;
            continue;
          }
          part[at] = (rnd() - 0.5) * 8;
          part[at + 1] = 0.5 + rnd() * 16;
          for (let i = 0; i < s.hd; i++) part[at + 2 + i] = (rnd() - 0.5) * 2 ** Math.floor(rnd() * 16 - 8);
        }
      }
      const bytes = new Uint8Array(part.buffer);
      const [, out] = await runKernel(d, attentionCombine(caps, s), [bytes.slice(), new Uint8Array(4 * k)]);
      for (const w of QTYPES) {
        if (!xqPrepCombines(caps, { k, w, combine: s })) continue;
        tried++;
        const total = xqLayout(w, k, false).total;
        const words = async (kern: ReturnType<typeof xqPrep>, x: Uint8Array) => new Uint32Array((await runKernel(d, kern, [x, new Uint8Array(4 * total)]))[1].buffer.slice(0, 4 * total));
        const [a, b] = [await words(xqPrep(caps, { k, w }), out.slice(0, 4 * k)), await words(xqPrep(caps, { k, w, combine: s }), bytes.slice())];
        const i = a.findIndex((v, j) => v !== b[j]);
        if (i >= 0) bad.push(`${w} k ${k} (${s.heads}x${s.hd}, ${s.splits} splits): word ${i} of ${total}: ${a[i]} apart, ${b[i]} combined`);
      }
    }
    assert.ok(tried >= 6, `${tried} type x shape pairs ran`);
    assert.deepEqual(bad, []);
  });
}

test("a ptx decode plan folds the attention combine into the o projection's prep, and CompileOptions.combinePrep false does not", () => {
  const t = targetFor("ptx"), c = SHAPES["llama-3.2-1b"];
  const target = { ...t, caps: { ...t.caps, dot4: true } };
  /** The three kernels after the first layer's attention partials. */
  const after = (dtype: "q8_0" | "q4_k_m", combinePrep?: boolean) => {
    const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 2048, kvDtype: "f16" }, { dtypeOf: syntheticLlama(c, { dtype }).dtypeOf });
    tracer.output("token", tracer.argmax(logits, 1));
    const names = compileGraph(tracer.build(), target, combinePrep === undefined ? {} : { combinePrep }).steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name.replace(/_l\d+r\d+u\d+t\d+$/, "")] : []));
    const i = names.findIndex((n) => /^(flash_decode|attention_partial)/.test(n));
    return names.slice(i + 1, i + 3);
  };
  assert.deepEqual(after("q8_0"), ["xq_prep_q8_0_k2048_combine_d64_s32", "gemv_q8_0x8p_k2048_n2048r"]);
  assert.deepEqual(after("q4_k_m"), ["xq_prep_q4_k_k2048_combine_d64_s32", "gemv_q4_kx8p_k2048_n2048r"]);
  assert.deepEqual(after("q8_0", false), ["attention_combine_i32_d64_s32", "xq_prep_q8_0_k2048"]);
});

test("x is prepared once per gemv by default on every target with an int8 dot, dispatch gap or not (Vulkan, WebGPU, ptx)", () => {
  const c = SHAPES["llama-3.2-1b"];
  for (const backend of ["ptx", "spirv", "wgsl"] as const) {
    const t = targetFor(backend), target = { ...t, caps: { ...t.caps, dot4: true } };
    const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 2048, kvDtype: "f16" }, { dtypeOf: syntheticLlama(c, { dtype: "q4_k_m" }).dtypeOf });
    tracer.output("token", tracer.argmax(logits, 1));
    const names = compileGraph(tracer.build(), target).steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : []));
    const gemvs = names.filter((n) => n.startsWith("gemv_"));
    assert.ok(gemvs.length > 0 && gemvs.every((n) => /^gemv_q[46]_kx8p_/.test(n)), `${backend}: ${gemvs.filter((n) => !/x8p_/.test(n)).slice(0, 3).join(", ")}`);
    assert.ok(names.some((n) => n.startsWith("xq_prep_")), backend);
    const off = compileGraph(tracer.build(), target, { xqPrep: false }).steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name] : []));
    assert.ok(!off.some((n) => n.startsWith("xq_prep_")) && off.some((n) => /^gemv_q4_kx8_/.test(n)), `${backend}: xqPrep false`);
  }
});

test("a Vulkan or WebGPU decode plan's fused attention writes the o projection's prepared x (CompileOptions.attentionPrep false: a prep of its own)", () => {
  const c = SHAPES["llama-3.2-1b"];
  for (const backend of ["spirv", "wgsl"] as const) {
    const t = targetFor(backend), target = { ...t, caps: { ...t.caps, dot4: true } };
    for (const dtype of ["q8_0", "q4_k_m"] as const) {
      const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 2048, kvDtype: "f16" }, { dtypeOf: syntheticLlama(c, { dtype }).dtypeOf });
      tracer.output("token", tracer.argmax(logits, 1));
      const w = dtype === "q8_0" ? "q8_0" : "q4_k";
      const after = (opts: CompileOptions) => {
        const names = compileGraph(tracer.build(), target, opts).steps.flatMap((s) => (s.k === "kernel" ? [s.kernel.name.replace(/_l\d+r\d+u\d+t\d+$/, "")] : []));
        const i = names.findIndex((n) => n.startsWith("attention_fused"));
        return names.slice(i);
      };
      assert.deepEqual(after({}).slice(0, 2), [`attention_fused_r1_h32_kv8_d64_c2048_f16_i32_s32_wl_xq${w}`, `gemv_${w}x8p_k2048_n2048r`], `${backend} ${dtype}`);
      assert.deepEqual(after({ attentionPrep: false }).slice(0, 3), ["attention_fused_r1_h32_kv8_d64_c2048_f16_i32_s32_wl", `xq_prep_${w}_k2048`, `gemv_${w}x8p_k2048_n2048r`], `${backend} ${dtype}, attentionPrep false`);
    }
  }
});

test("a layer's q/k and v preps (q4_k, q6_k) write different scratch: where steps run together unless their bytes meet, the v prep needs no barrier after the q/k gemv", () => {
  const c = SHAPES["llama-3.2-1b"], t = targetFor("spirv"), target = { ...t, caps: { ...t.caps, dot4: true } };
  const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap: 2048, kvDtype: "f16" }, { dtypeOf: syntheticLlama(c, { dtype: "q4_k_m" }).dtypeOf });
  tracer.output("token", tracer.argmax(logits, 1));
  // (siblings off: the two preps and the two gemvs would otherwise be one launch each, tests/kernels/siblings.test.ts)
  const steps = compileGraph(tracer.build(), target, { siblings: false }).steps;
  const span = (b: { buffer: number; offset: number; bytes: number }) => ({ buffer: b.buffer, lo: b.offset, hi: b.offset + b.bytes });
  const access = steps.map((s): StepAccess => {
    if (s.k === "copy") return { reads: [span(s.src)], writes: [span(s.dst)] };
    if (s.k !== "kernel") throw new Error("a collective in a one-device plan");
    const io = s.kernel.buffers.map((b, i) => ({ a: b.access, s: span(s.bindings[i]) }));
    return { reads: io.filter((x) => x.a !== "w").map((x) => x.s), writes: io.filter((x) => x.a !== "r").map((x) => x.s) };
  });
  const barrier = barriersBefore(access);
  const names = steps.map((s) => (s.k === "kernel" ? s.kernel.name : s.k));
  const vPreps = names.flatMap((n, i) => (n.startsWith("xq_prep_q6_k_k2048_norm") && i + 1 < names.length && names[i + 1].includes("_n512f16c") ? [i] : []));
  assert.ok(vPreps.length >= 2, `layers with a q6_k v: ${vPreps.length}`);
  for (const i of vPreps) {
    assert.match(names[i - 1], /^gemv_q4_kx8p_k2048_norm_rope/, "the q/k gemv just before");
    assert.equal(barrier[i], false, `${names[i]} (step ${i}) waits for ${names[i - 1]}`);
    assert.equal(barrier[i + 1], true, "the v gemv waits for its prep");
  }
});
