// The int8x4 dot (kernels/ir.ts BinOp dot4) on Vulkan and WebGPU, both ways each renderer writes it: native
// (SPIR-V OpSDotKHR, WGSL dot4I8Packed: caps.dot4Native, as lavapipe and Deno's WebGPU on it offer) and hidden
// (VulkanOptions.noDot4, WgpuOpenOptions.dot4 false: the byte-product decomposition). On each: the dot4 feature
// kernel, edge words included, bit-exact against kernels/render/js_runtime.ts dot4; the op harness's quantized-x
// cases (int8 x, the integer gemv) both within the oracle's bound, and bit-identical to each other where the float
// code cannot be contracted differently (Vulkan; lavapipe); and the caps each device reports. A device that is absent or offers no native dot is a skip with the reason.
import { test } from "node:test";
import assert from "node:assert/strict";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { type OpenOptions, probeBackend } from "../../backends/open.ts";
import { evaluate } from "../../graph/eval.ts";
import { type Storage, storageFromBytes } from "../../graph/dtype.ts";
import { assertClose } from "../../graph/tolerance.ts";
import { compileGraph } from "../../kernels/lower.ts";
import { RENDERERS } from "../../kernels/render/mod.ts";
import { dot4 } from "../../kernels/render/js_runtime.ts";
import { dot4Case } from "./feature_kernels.ts";
import { openDevice, selectedBackends, slowDevice, softwareShare } from "./index.ts";
import { runFeature } from "./run.ts";
import { opCases } from "../ops/cases.ts";
import { loadCaseWeights } from "../ops/load.ts";

const HIDE: Record<"vulkan" | "wgpu", OpenOptions> = { vulkan: { vulkan: { noDot4: true } }, wgpu: { wgpu: { dot4: false } } };

/** The dot4 case's outputs as js_runtime's dot4 computes them. */
function expected(): Int32Array {
  const fc = dot4Case();
  const [a, b] = fc.inputs.map((x) => new Uint32Array(x.slice().buffer));
  const n = a.length, want = new Int32Array(3 * n);
  for (let i = 0; i < n; i++) {
    want[i] = dot4(a[i], b[i]);
    want[n + i] = (dot4(a[i], 0x01010101) + dot4(b[i], a[i]) - dot4(a[i], a[i])) | 0;
    want[2 * n + i] = dot4(a[i] & 0x0f0f0f0f, b[i]);
  }
  return want;
}

/** Whether the device's renderer writes dot4 natively (read from what it renders, not only from the caps). */
function rendersNative(dev: Device): boolean {
  const k = dot4Case().kernel, caps = dev.target.caps;
  return dev.target.backend === "vulkan" ? RENDERERS.spirv.render(k, caps).needs.dotProduct : RENDERERS.wgsl.render(k, caps).code.includes("dot4I8Packed(");
}

/** Runs one op case on `eng` (one step; every case here is one) and returns its outputs, each checked against the oracle. */
async function runChecked(eng: Engine<Device>, c: ReturnType<typeof opCases>[number], what: string): Promise<Record<string, Uint8Array>> {
  const consts = await loadCaseWeights(eng, c);
  const id = eng.addEntry(`dot4:${c.name}`, c.graph);
  try {
    const want = evaluate(c.graph, { consts, slots: c.slots, state: {} }, { bounds: c.bounds ?? "worst" });
    const got = await eng.step(id, c.slots as Record<string, Storage>);
    const out: Record<string, Uint8Array> = {};
    for (const [name, x] of Object.entries(want.output)) {
      const d = c.graph.nodes[c.graph.outputs[name]].dtype;
      assertClose(`${what} ${c.name} ${name}`, d, got.outputs[name] as Storage, x, want.bounds!.output[name]);
      out[name] = new Uint8Array(got.outputs[name].buffer.slice(0));
    }
    for (const [name, x] of Object.entries(want.state)) {
      const d = c.graph.states[name].dtype, bytes = await eng.readState(name);
      assertClose(`${what} ${c.name} state ${name}`, d, storageFromBytes(d, bytes), x, want.bounds!.state[name]);
      out[`state ${name}`] = bytes.slice();
    }
    return out;
  } finally {
    eng.removeEntry(id);
    eng.resetState();
  }
}

for (const backend of selectedBackends().filter((b): b is "vulkan" | "wgpu" => b === "vulkan" || b === "wgpu")) {
  const native = await openDevice(backend);
  const name = typeof native === "string" ? "" : `${backend} (${native.target.device})`;
  const absent = typeof native === "string" ? native : !native.target.caps.dot4Native ? `${name} has no native int8x4 dot` : false;
  const hidden = absent ? absent : await probeBackend(backend, HIDE[backend]);
  const skip = absent || (typeof hidden === "string" ? hidden : false);
  const devs = () => [["native", native as Device], ["hidden", hidden as Device]] as const;

  test(`dot4 on ${backend}: native and hidden renderings, edge words, bit-exact vs js_runtime dot4`, { skip, timeout: 120_000 }, async () => {
    const want = expected();
    for (const [how, dev] of devs()) {
      assert.equal(rendersNative(dev), how === "native", `${how}: the renderer's dot4`);
      const out = await runFeature(dev, dot4Case());
      const got = new Int32Array(out[2].slice().buffer);
      const bad = [...want.keys()].filter((i) => got[i] !== want[i]).slice(0, 6).map((i) => `[${i}] ${got[i]} != ${want[i]}`);
      assert.deepEqual(bad, [], `${how} on ${name}`);
    }
  });

  test(`dot4 caps on ${backend}: hidden reports neither dot4Native nor dot4; a CPU device keeps the float gemv default`, { skip }, () => {
    const [[, n], [, h]] = devs();
    assert.equal(h.target.caps.dot4Native, false);
    assert.equal(h.target.caps.dot4, false);
    // lavapipe: the packed dot is not accelerated (Vulkan) and the adapter is a CPU one (WebGPU)
    if (/llvmpipe|lavapipe|swiftshader/i.test(n.target.device)) assert.equal(n.target.caps.dot4, false);
    if (n.target.caps.dot4) assert.equal(n.target.caps.dot4Native, true);
  });

  // (the hidden rendering is a forced variant: on lavapipe the vulkan and wgpu backends deal the cases between them,
  // tests/devices/index.ts softwareShare)
  const all = opCases().filter((c) => c.name.includes("quantized x")), xq = softwareShare(native, all);
  const heavy = typeof native === "string" ? false : slowDevice(native);
  // SPIR-V marks float adds and multiplies NoContraction, so both renderings' float code gives the same bits. WGSL
  // cannot forbid contraction and a GPU's compiler may fuse differently around different integer code: there both
  // are held to the oracle's bound only (lavapipe's LLVM fuses alike in both: held bit for bit).
  const bitwise = backend === "vulkan" || /llvmpipe|lavapipe/i.test(name);
  const same = bitwise ? "native == hidden bit for bit, " : "";
  test(`quantized-x gemv on ${backend}: ${xq.length} of ${all.length} op cases, ${same}both within the oracle's bound`, { skip: skip || heavy, timeout: 600_000 }, async () => {
    assert.ok(all.length >= 6, `only ${all.length} quantized-x cases`);
    const [[, n], [, h]] = devs();
    const engines = [n, h].map((d) => new Engine(d, { compile: (g, t) => compileGraph(g, t, { quantizedX: false }), timeoutMs: 60_000, ownsDevice: false }));
    const bad: string[] = [];
    try {
      for (const c of xq) {
        try {
          const [a, b] = [await runChecked(engines[0], c, "native"), await runChecked(engines[1], c, "hidden")];
          for (const k of Object.keys(a)) if (bitwise && a[k].join() !== b[k].join()) bad.push(`${c.name} ${k}: native and hidden differ`);
        } catch (e) {
          bad.push(`${c.name}: ${(e as Error).message.split("\n")[0]}`);
        }
      }
    } finally {
      for (const e of engines) await e.unload();
    }
    assert.deepEqual(bad, []);
  });

  test(`dot4 on ${backend}: the hidden device closes`, { skip }, async () => {
    await (hidden as Device).destroy();
  });
}
