// Run by device.test.ts in a child process, one phase per process: a trap leaves a sticky error in the CUDA
// context of the process that sees it, and the test runner's own context must stay clean. Prints one line
// "RESULT {json}" describing what each call raised.
import process from "node:process";
import type { Device } from "../../backends/device.ts";
import { Engine } from "../../backends/executor.ts";
import { probePtx, PtxDevice } from "../../backends/ptx/mod.ts";
import type { Cuda } from "../../ffi/cuda.ts";
import { entryName } from "../../kernels/render/ptx.ts";
import { FakeCuda } from "./fake_cuda.ts";
import { type Kernel, KernelBuilder } from "../../kernels/ir.ts";
import { compileGraph } from "../../kernels/lower.ts";
import type { Program } from "../../kernels/program.ts";
import type { Graph } from "../../graph/ir.ts";
import { Tracer } from "../../graph/tracer.ts";
import { cases as libraryCases } from "../kernels/cases.ts";
import { runCase } from "../kernels/harness.ts";
import { checkCase } from "../devices/feature_kernels.ts";
import { readAll, stepOf, upload } from "../devices/run.ts";

const out: Record<string, unknown> = {};
const done = () => {
  console.log(`RESULT ${JSON.stringify(out)}`);
  process.exit(0);
};
const errName = (e: unknown) => (e as Error).name;
async function outcome(f: () => unknown): Promise<string> {
  try {
    await f();
    return "ok";
  } catch (e) {
    return errName(e);
  }
}
// POOT_PTX_FAKE=1 runs the phases over FakeCuda (CI checks this protocol without a GPU).
const FAKE = process.env.POOT_PTX_FAKE === "1";
function open(opts = {}): PtxDevice {
  if (FAKE) {
    const cu = new FakeCuda();
    cu.spinMs = 5000;
    const d = new PtxDevice(cu as unknown as Cuda, { spinMicros: 1000 });
    const compile = d.compile.bind(d);
    d.compile = (k: Kernel) => {
      cu.kernels.set(entryName(k.name), k);
      return compile(k);
    };
    return d;
  }
  const d = probePtx(opts);
  if (typeof d === "string") {
    out.skip = d;
    done();
  }
  return d as PtxDevice;
}
const T = 30_000;

/** A kernel failing check `code` where its input is >= 1000. */
function guard(name: string, code: number): Kernel {
  const b = new KernelBuilder(name, { workgroup: 64, grid: 4 });
  const x = b.buffer("x", "f32", "r"), y = b.buffer("y", "f32", "w");
  const v = b.let(b.load(x, b.gid.x), "f32");
  b.check(v.lt(1000), code);
  b.store(y, b.gid.x, v.add(1));
  return b.build();
}

const phase = process.argv[2];
if (phase === "eager") {
  const d = open();
  const c = checkCase(true);
  const bufs = upload(d, c);
  const good = checkCase(false);
  const spare = d.alloc(64, "device");
  d.run([stepOf(d, c, bufs)]);
  try {
    await d.synchronize(T);
    out.fault = "none";
  } catch (e) {
    const f = e as { name: string; kernel?: string; code?: number };
    out.fault = { name: f.name, kernel: f.kernel, code: f.code };
  }
  out.poisoned = d.poisoned;
  out.after = {
    alloc: await outcome(() => d.alloc(16, "device")),
    write: await outcome(() => d.write(spare, 0, new Uint8Array(16))),
    compile: await outcome(() => d.compile(good.kernel)),
    run: await outcome(() => d.run([])),
    replay: await outcome(() => d.replay({ steps: 0 })),
    synchronize: await outcome(() => d.synchronize(T)),
    read: await outcome(() => d.read(spare, 0, 16)),
  };
  // The process goes on: plain JavaScript work still runs.
  out.processAlive = [1, 2, 3].reduce((a, b) => a + b) === 6;
  await d.destroy();
  done();
} else if (phase === "graph") {
  const d = open();
  const ka = guard("guard_a", 8), kb = guard("guard_b", 9), kc = guard("guard_c", 10);
  const ok = new Float32Array(256).fill(1), bad = new Float32Array(256).fill(1);
  bad[200] = 5000;
  const buf = (a: Float32Array) => {
    const x = d.alloc(1024, "device");
    d.write(x, 0, new Uint8Array(a.buffer));
    return x;
  };
  const xa = buf(ok), xb = buf(bad), xc = buf(ok), y = d.alloc(1024, "device");
  const step = (k: Kernel, x: ReturnType<typeof buf>) => ({
    k: "kernel" as const, compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 },
    bindings: [{ buffer: x, offset: 0, bytes: 1024 }, { buffer: y, offset: 0, bytes: 1024 }],
  });
  const rec = d.record([step(ka, xa), step(kb, xb), step(kc, xc)]);
  d.replay(rec);
  try {
    await d.synchronize(T);
    out.fault = "none";
  } catch (e) {
    const f = e as { name: string; kernel?: string; code?: number };
    out.fault = { name: f.name, kernel: f.kernel, code: f.code };
  }
  out.refused = await outcome(() => d.replay(rec));
  await d.destroy();
  done();
} else if (phase === "engine") {
  const d = open();
  // A graph whose lowering has no checks of its own; the compile hook appends a failing guard step.
  const t = new Tracer();
  const x = t.slot("x", { kind: "Token", dtype: "f32", shape: [256] });
  t.output("y", t.add(x, x));
  const graph: Graph = t.build();
  const compile = (g: Graph, target: Parameters<typeof compileGraph>[1]): Program => {
    const p = compileGraph(g, target);
    const k = guard("guard_engine", 11);
    const slot = p.slots[0];
    p.buffers.push({ id: p.buffers.length, kind: "arena", bytes: 1024, name: "guard_out" });
    p.steps.push({ k: "kernel", kernel: k, grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: slot.buffer, offset: slot.offset, bytes: 1024 }, { buffer: p.buffers.length - 1, offset: 0, bytes: 1024 }] });
    return p;
  };
  const eng = new Engine(d as Device, { compile, timeoutMs: T });
  const id = eng.addEntry("guarded", graph);
  const xs = new Float32Array(256).fill(2);
  xs[3] = 4000;
  out.first = await outcome(() => eng.step(id, { x: xs }));
  out.second = await outcome(() => eng.step(id, { x: new Float32Array(256) }));
  await d.destroy();
  done();
} else if (phase?.startsWith("library:")) {
  // One library fault case (by index into `cases`) per process.
  const kc = libraryCases[Number(phase.slice(8))];
  const d = open();
  try {
    const r = await runCase(d, kc, T);
    out.got = r.fault ? `KernelFault ${r.fault.code}` : "no fault";
  } catch (e) {
    out.got = `${errName(e)}: ${(e as Error).message}`;
  }
  out.name = kc.name;
  out.want = kc.fault;
  await d.destroy();
  done();
} else if (phase === "timeout") {
  const d = open();
  // Spins for a count read from a buffer (so it cannot be folded): about a second on one thread.
  const b = new KernelBuilder("spin", { workgroup: 1, grid: 1 });
  const n = b.buffer("n", "u32", "r"), y = b.buffer("y", "f32", "w");
  const acc = b.let(0, "f32");
  b.for(0, b.load(n, 0), 1, () => b.set(acc, acc.mul(0.999999).add(1)));
  b.store(y, 0, acc);
  const k = b.build();
  const nb = d.alloc(16, "device"), yb = d.alloc(16, "device");
  d.write(nb, 0, new Uint8Array(Uint32Array.from([300_000_000, 0, 0, 0]).buffer));
  d.run([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: nb, offset: 0, bytes: 16 }, { buffer: yb, offset: 0, bytes: 16 }] }]);
  const t0 = performance.now();
  out.sync = await outcome(() => d.synchronize(200));
  out.waitedMs = Math.round(performance.now() - t0);
  out.after = await outcome(() => d.alloc(16, "device"));
  await d.destroy();
  done();
} else if (phase === "recover") {
  let d = open();
  const c = checkCase(true);
  d.run([stepOf(d, c, upload(d, c))]);
  out.fault = await outcome(() => d.synchronize(T));
  await d.destroy();
  try {
    d = open();
    const g = checkCase(false);
    const bufs = upload(d, g);
    d.run([stepOf(d, g, bufs)]);
    await d.synchronize(T);
    const y = new Float32Array((await readAll(d, bufs))[1].buffer), x = new Float32Array(g.inputs[0].buffer);
    out.recovered = y.every((v, i) => v === Math.fround(x[i] * 2));
    await d.destroy();
  } catch (e) {
    out.recovered = false;
    out.error = `${errName(e)}: ${(e as Error).message}`;
  }
  done();
} else {
  out.error = `unknown phase ${phase}`;
  done();
}
