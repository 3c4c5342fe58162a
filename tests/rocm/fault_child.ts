// Run by hardware.test.ts (and, over FakeHsa, by device.test.ts) in a child process, one phase per process:
// a trap or a stuck kernel leaves the queue of the process that sees it unusable, and the test runner's own
// runtime must stay clean. Prints one line "RESULT {json}" describing what each call raised, in the format
// of tests/ptx/child.ts (whose expectPhase checks it).
import process from "node:process";
import type { Hsa } from "../../ffi/hsa.ts";
import { probeRocm, RocmDevice } from "../../backends/rocm/mod.ts";
import { type Kernel, KernelBuilder, u32 } from "../../kernels/ir.ts";
import { checkCase } from "../devices/feature_kernels.ts";
import { stepOf, upload } from "../devices/run.ts";
import { FakeHsa } from "./fake_hsa.ts";

const out: Record<string, unknown> = {};
const done = () => {
  console.log(`RESULT ${JSON.stringify(out)}`);
  process.exit(0);
};
async function outcome(f: () => unknown): Promise<string> {
  try {
    await f();
    return "ok";
  } catch (e) {
    return (e as Error).name;
  }
}
// POOT_ROCM_FAKE=1 runs the phases over FakeHsa (CI checks this protocol without a GPU).
const FAKE = process.env.POOT_ROCM_FAKE === "1";
let fake: FakeHsa | undefined;
async function open(): Promise<RocmDevice> {
  if (FAKE) {
    fake = new FakeHsa();
    return new RocmDevice(fake as unknown as Hsa, { compile: fake.compiler, spinMicros: 1000 });
  }
  const d = await probeRocm();
  if (typeof d === "string") {
    out.skip = d;
    done();
  }
  return d as RocmDevice;
}
const T = 30_000;
const caught = (e: unknown) => {
  const f = e as { name: string; kernel?: string; code?: number };
  return { name: f.name, kernel: f.kernel, code: f.code };
};

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
  const d = await open();
  const c = checkCase(true);
  const bufs = upload(d, c);
  const good = checkCase(false);
  const spare = d.alloc(64, "device");
  d.run([stepOf(d, c, bufs)]);
  try {
    await d.synchronize(T);
    out.fault = "none";
  } catch (e) {
    out.fault = caught(e);
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
  out.processAlive = [1, 2, 3].reduce((a, b) => a + b) === 6;
  await d.destroy();
  done();
} else if (phase === "graph") {
  const d = await open();
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
  await d.synchronize(T);
  d.replay(rec);
  try {
    await d.synchronize(T);
    out.fault = "none";
  } catch (e) {
    out.fault = caught(e);
  }
  out.refused = await outcome(() => d.replay(rec));
  await d.destroy();
  done();
} else if (phase === "timeout") {
  const d = await open();
  // A kernel that runs for minutes on a GPU (2^31 dependent iterations); the fake's queue never runs it.
  const b = new KernelBuilder("spin", { workgroup: 1, grid: 1 });
  const y = b.buffer("y", "u32", "rw");
  const acc = b.let(b.load(y, 0), "u32", "acc");
  b.for(u32(0), u32(2 ** 31), 1, (i) => b.set(acc, acc.mul(1664525).add(i)));
  b.store(y, 0, acc);
  const k = b.build();
  const yb = d.alloc(16, "device");
  await d.synchronize(T);
  if (fake) fake.mode = "hang";
  d.run([{ k: "kernel", compiled: d.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: [{ buffer: yb, offset: 0, bytes: 16 }] }]);
  const t0 = performance.now();
  out.sync = await outcome(() => d.synchronize(200));
  out.waitedMs = Math.round(performance.now() - t0);
  out.after = await outcome(() => d.alloc(16, "device"));
  done();
} else {
  out.error = `unknown phase ${phase}`;
  done();
}
