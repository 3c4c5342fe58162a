// Run by timeout.test.ts in a child process (a kernel left spinning on lavapipe's CPU threads must not hold
// the test runner): a kernel loops for a count read from a buffer under a 2 s wait bound. Prints one line
// "RESULT {json}" with what each call raised, then exits (the parent kills it if the exit hangs).
import process from "node:process";
import { Engine } from "../../backends/executor.ts";
import { openVulkanDevice } from "../../backends/vulkan/mod.ts";
import type { Graph } from "../../graph/ir.ts";
import { KernelBuilder, u32 } from "../../kernels/ir.ts";
import type { Program } from "../../kernels/program.ts";

const out: Record<string, unknown> = {};
const name = (f: () => unknown) => {
  try {
    f();
    return "ok";
  } catch (e) {
    return (e as Error).name;
  }
};
const nameAsync = async (f: () => Promise<unknown>) => {
  try {
    await f();
    return "ok";
  } catch (e) {
    return (e as Error).name;
  }
};

const dev = openVulkanDevice({ timeoutMs: 2000 });
// Spins for a count read from a buffer: 2^32 - 1 iterations of 16 xorshift rounds (no closed form for a
// compiler to fold) per invocation, over 65536 invocations. A GPU runs every invocation at once, so the
// time is one invocation's chain of ~2e11 dependent integer ops: minutes on the fastest (an H200 finished a
// 65535-iteration spin well inside 2 s). lavapipe ends a loop after 65535 iterations per invocation (all
// loops together), which is why the work is also wide: 65536 x 65535 iterations is hours on its CPU threads.
// Either way the work is finite, and killing the child ends it.
const b = new KernelBuilder("spin", { workgroup: 64, grid: 1024 });
const N = b.buffer("n", "u32", "r"), O = b.buffer("out", "u32", "w");
const x = b.let(b.gid.x.add(1));
b.for(b.load(N, 0), b.load(N, 1), 1, () => {
  for (let r = 0; r < 16; r++) {
    b.set(x, x.xor(x.shl(13)));
    b.set(x, x.xor(x.shr(17)));
    b.set(x, x.xor(x.shl(5)));
  }
});
b.if(x.eq(u32(12345)), () => b.store(O, 0, x));
const kernel = b.build();
const program: Program = {
  buffers: [{ id: 0, kind: "slot", bytes: 16, name: "n" }, { id: 1, kind: "readback", bytes: 16, name: "out" }],
  steps: [{ k: "kernel", kernel, grid: kernel.grid, work: { bytes: 16, flops: 0 }, bindings: [{ buffer: 0, offset: 0, bytes: 16 }, { buffer: 1, offset: 0, bytes: 16 }] }],
  slots: [{ name: "n", buffer: 0, offset: 0, dtype: "u32", shape: [4] }],
  state: [],
  outputs: [{ name: "out", buffer: 1, offset: 0, dtype: "u32", shape: [4] }],
  weights: [],
};
const engine = new Engine(dev, { compile: () => program, timeoutMs: 2000 });
const id = engine.addEntry("spin", {} as Graph);
// a short run first: the same recording works when it finishes in time
out.short = await nameAsync(() => engine.step(id, { n: Uint32Array.of(0, 2, 0, 0) }));
const t0 = performance.now();
out.spin = await nameAsync(() => engine.step(id, { n: Uint32Array.of(0, 0xffffffff, 0, 0) }));
out.ms = Math.round(performance.now() - t0);
out.poisoned = dev.poisoned ?? null;
out.step = await nameAsync(() => engine.step(id, { n: Uint32Array.of(0, 1, 0, 0) }));
out.alloc = name(() => dev.alloc(16, "device"));
out.compile = name(() => dev.compile(kernel));
out.synchronize = await nameAsync(() => dev.synchronize(10));
out.reset = name(() => engine.resetState());
out.free = name(() => engine.removeEntry(id)); // leaks quietly: queued work may reference it
out.alive = true;
console.log(`RESULT ${JSON.stringify(out)}`);
await engine.unload();
process.exit(0);
