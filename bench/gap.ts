// Where a decode token's time goes between bench/decode.ts (the Engine's per-token loop over synthetic weights)
// and bench/kernels.ts --wall (a bare replay of the same plan over buffers of its own): on one device, one
// process, the same plan, in this order (each line ms per token, device wait and host µs):
//
//   engine          the Engine's loop as bench/decode.ts runs it (positions 0..n-1, greedy tokens fed back)
//   engine again    the same, right after (a cold GPU clock or a first-use cost shows as a difference)
//   engine pos 0    the position and token held at 0 and 1 (the data and the attention length held still)
//   engine pos 48   held at 48
//   rec bare        the Engine's own recording replayed and synchronized, no slot writes and no readback
//   rec queued      the same replays queued back to back, one synchronize
//   rec + writes    bare, with the Engine's slot writes of one step (same buffers, same bytes) before each replay
//   rec + read      bare, with the Engine's readback of the token after each synchronize
//   reset           resetState and a synchronize (every engine line pays one before its timed steps)
//   launch + sync   the Engine's launch (slot writes, replay) with a bare synchronize and read after each
//   own buffers     the plan recorded over buffers bench/kernels.ts allocates (allocProgram, random weights)
//   engine last     the Engine's loop once more, after all of that
//
// With --profile (timestamps on the device) the per-kernel µs of the Engine's recording during "engine again" and
// of the own-buffer recording are printed side by side, and on Vulkan the heaps (with VK_EXT_memory_budget's
// budget and usage), the memory types, and where the biggest buffers landed.
//
//   deno run -A bench/gap.ts --shape llama-3.2-1b,qwen2.5-0.5b --backend vulkan,wgpu [--tokens 64] [--profile]
//   deno run -A bench/gap.ts --floor --backend vulkan,wgpu   (µs per dispatch of a tiny kernel: a chain where each
//     dispatch depends on the one before, so a barrier sits between them, and one where none does)
import { argv, exit } from "node:process";
import { parseFlags } from "./flags.ts";
import { Engine } from "../backends/executor.ts";
import type { Device, DeviceBuffer, DeviceStep, Recording, StepTime } from "../backends/device.ts";
import type { MemoryReport } from "../backends/vulkan/memory.ts";
import { probeBackend } from "../backends/open.ts";
import { compileGraph } from "../kernels/lower.ts";
import type { Program } from "../kernels/program.ts";
import { syntheticLlama } from "../llm/synthetic.ts";
import { decodeGraph } from "./decode.ts";
import { backendVariant } from "./kernels.ts";
import { allocProgram, deviceSteps, kernelTable, type Profile, profileOf } from "./profile.ts";
import { isShapeName, SHAPES } from "./shapes.ts";
import { TimedDevice } from "./timed.ts";
import { KernelBuilder } from "../kernels/ir.ts";
import { replayMicros } from "./kernels.ts";

/** TimedDevice that can keep the writes and reads of one Engine step, to replay them around a bare replay. */
class CaptureDevice extends TimedDevice {
  capture = false;
  writes: [DeviceBuffer, number, Uint8Array][] = [];
  reads: [DeviceBuffer, number, number][] = [];
  override write(buf: DeviceBuffer, offset: number, data: Uint8Array): void {
    if (this.capture) this.writes.push([buf, offset, data.slice()]);
    super.write(buf, offset, data);
  }
  override read(buf: DeviceBuffer, offset: number, bytes: number): Promise<Uint8Array> {
    if (this.capture) this.reads.push([buf, offset, bytes]);
    return super.read(buf, offset, bytes);
  }
}

interface Line {
  what: string;
  ms: number;
  waitMicros: number;
  hostMicros: number;
  /** Of hostMicros, replay() (issuing) and read() (readback), when the line counted them. */
  issueMicros?: number;
  readMicros?: number;
}

/** A line from the device's times over `tokens` steps of `ms` each. */
function lineOf(what: string, ms: number, t: { wait: number; issue: number; read: number }, tokens: number): Line {
  const per = (x: number) => x / tokens * 1000;
  return { what, ms, waitMicros: per(t.wait), hostMicros: ms * 1000 - per(t.wait), issueMicros: per(t.issue), readMicros: per(t.read) };
}

/** Per-step times summed over replays, then a Profile (µs per launch per kernel) of `prog`. */
class StepSum {
  sum: StepTime[];
  n = 0;
  constructor(readonly prog: Program) {
    this.sum = prog.steps.map(() => ({ interval: 0, busy: 0 }));
  }
  add(t: StepTime[] | undefined): void {
    if (!t) return;
    t.forEach((x, i) => {
      this.sum[i].interval += x.interval;
      this.sum[i].busy += x.busy;
    });
    this.n++;
  }
  profile(backend: string, device: string, wallMs: number): Profile | undefined {
    if (!this.n) return undefined;
    return profileOf(backend, device, this.prog, this.sum.map((t) => ({ interval: t.interval / this.n, busy: t.busy / this.n })), wallMs);
  }
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;

export function formatMemory(m: MemoryReport): string {
  const out: string[] = [];
  for (const h of m.heaps) {
    const budget = h.budget === undefined ? "no budget query" : `budget ${mib(h.budget)}, usage ${mib(h.usage!)}`;
    out.push(`  heap ${h.index}: ${mib(h.bytes)}${h.deviceLocal ? " device-local" : ""}, ${budget}`);
  }
  for (const t of m.types) out.push(`  type ${t.index}: heap ${t.heap} ${t.flags.padEnd(11)} ours: ${t.buffers} buffers, ${mib(t.bytes)}`);
  out.push(`  largest buffers: ${m.large.map((b) => `${mib(b.bytes)} ${b.usage}->type ${b.type}`).join(", ")}`);
  return out.join("\n");
}

async function gapOf(entry: string, shape: string, tokens: number, profile: boolean, cap: number): Promise<void> {
  const { name, opts } = backendVariant(entry, profile);
  const dev0 = await probeBackend(name, opts);
  if (typeof dev0 === "string") {
    console.log(`${entry} ${shape}: skipped: ${dev0}`);
    return;
  }
  const dev = new CaptureDevice(dev0);
  const c = SHAPES[shape as keyof typeof SHAPES];
  const model = syntheticLlama(c, { dtype: "bf16", scratch: true });
  let prog: Program | undefined;
  const eng = new Engine(dev, { compile: (g, t) => prog = compileGraph(g, t) });
  const lines: Line[] = [];
  const say = (l: Line) => {
    lines.push(l);
    const parts = l.issueMicros === undefined ? "" : ` (issue ${l.issueMicros.toFixed(0)}, read ${l.readMicros!.toFixed(0)})`;
    console.log(`${entry} ${shape}: ${l.what.padEnd(14)} ${l.ms.toFixed(3)} ms/token (${(1000 / l.ms).toFixed(0)} tok/s), wait ${l.waitMicros.toFixed(0)} µs, host ${l.hostMicros.toFixed(0)} µs${parts}`);
  };
  const stepTimes = (rec: Recording) => dev0.stepTimes?.(rec);
  try {
    const t0 = performance.now();
    await eng.loadWeights(model.store, model.map);
    const id = eng.addEntry(`gap:${shape}`, decodeGraph(c, cap, "f16", model.dtypeOf));
    const rec = dev.recordings[dev.recordings.length - 1];
    console.log(`${entry} ${shape}: loaded and compiled in ${((performance.now() - t0) / 1000).toFixed(1)} s, ${prog!.steps.length} steps`);
    const mem = (dev0 as { memoryReport?: () => MemoryReport }).memoryReport?.();
    if (mem) console.log(`${entry} ${shape}: memory after loading\n${formatMemory(mem)}`);

    const stats = (dev0 as { stats?: Record<string, number> }).stats;
    let before: Record<string, number> | undefined;
    const engine = async (what: string, posAt: (i: number) => number, feed: boolean, sum?: StepSum, withStats = false) => {
      eng.resetState();
      let tok = 1;
      for (let i = 0; i < 4; i++) tok = (await eng.step(id, { token: new Int32Array([feed ? tok : 1]), pos: new Int32Array([posAt(i)]) })).outputs.token[0];
      eng.resetState();
      tok = 1;
      const tokenBuf = new Int32Array(1), posBuf = new Int32Array(1);
      dev.take();
      if (withStats && stats) before = { ...stats };
      const t1 = performance.now();
      for (let i = 0; i < tokens; i++) {
        tokenBuf[0] = feed ? tok : 1;
        posBuf[0] = posAt(i);
        tok = (await eng.step(id, { token: tokenBuf, pos: posBuf })).outputs.token[0];
        sum?.add(stepTimes(rec));
      }
      say(lineOf(what, (performance.now() - t1) / tokens, dev.take(), tokens));
    };
    const bare = async (what: string, queued: boolean, writes = false, reads = false) => {
      for (let i = 0; i < 3; i++) {
        dev.replay(rec);
        await dev.synchronize(60_000);
      }
      dev.take();
      const t1 = performance.now();
      for (let i = 0; i < tokens; i++) {
        if (writes) for (const [b, o, d] of dev.writes) dev.write(b, o, d);
        dev.replay(rec);
        if (!queued) await dev.synchronize(60_000);
        if (reads) for (const [b, o, n] of dev.reads) await dev.read(b, o, n);
      }
      if (queued) await dev.synchronize(60_000);
      say(lineOf(what, (performance.now() - t1) / tokens, dev.take(), tokens));
    };

    await engine("engine", (i) => i, true);
    const engSum = new StepSum(prog!);
    await engine("engine again", (i) => i, true, engSum, true);
    if (stats && before) {
      const b = before, per = (k: string) => ((stats[k] - b[k]) / tokens).toFixed(k.endsWith("Micros") ? 0 : 2);
      console.log(`${entry} ${shape}: device stats per step of "engine again": ${Object.keys(stats).filter((k) => typeof stats[k] === "number" && k !== "pipelines" && k !== "lastEncodeMicros").map((k) => `${k} ${per(k)}`).join(", ")}`);
    }
    const pos0Sum = new StepSum(prog!);
    await engine("engine pos 0", () => 0, false, pos0Sum);
    await engine("engine pos 48", () => 48, false);
    // one step's writes and reads, kept (position 0, token 1)
    eng.resetState();
    dev.capture = true;
    await eng.step(id, { token: new Int32Array([1]), pos: new Int32Array([0]) });
    dev.capture = false;
    console.log(`${entry} ${shape}: a step writes ${dev.writes.map(([b, o, d]) => `${d.byteLength} B at ${o} of ${b.bytes}`).join(", ")}; reads ${dev.reads.map(([b, o, n]) => `${n} B at ${o} of ${b.bytes}`).join(", ")}`);
    await bare("rec bare", false);
    await bare("rec queued", true);
    await bare("rec + writes", false, true);
    await bare("rec + read", false, false, true);
    // resetState and a synchronize: each engine line resets before its timed steps, so pays it once per `tokens`.
    {
      const n = 8, t1 = performance.now();
      for (let i = 0; i < n; i++) {
        eng.resetState();
        await dev.synchronize(60_000);
      }
      const us = (performance.now() - t1) / n * 1000;
      console.log(`${entry} ${shape}: reset         ${us.toFixed(0)} µs (resetState + synchronize; ${(us / tokens).toFixed(1)} µs a token of an engine line)`);
    }
    // The Engine's launch (slot checks and writes, replay) with a bare wait and read: what finish() adds is the rest.
    {
      eng.resetState();
      await dev.synchronize(60_000);
      const tokenBuf = new Int32Array([1]), posBuf = new Int32Array([0]);
      dev.take();
      const t1 = performance.now();
      for (let i = 0; i < tokens; i++) {
        eng.launch(id, { token: tokenBuf, pos: posBuf });
        await dev.synchronize(60_000);
        for (const [b, o, n] of dev.reads) await dev.read(b, o, n);
      }
      say(lineOf("launch + sync", (performance.now() - t1) / tokens, dev.take(), tokens));
      await eng.step(id, { token: tokenBuf, pos: posBuf }); // the engine's own count of launches caught up
    }

    dev.take();
    const own = await ownBuffers(dev0, prog!, tokens);
    say(own.line);
    if (own.memory) console.log(`${entry} ${shape}: memory with both sets of buffers\n${formatMemory(own.memory)}`);
    await engine("engine last", (i) => i, true);

    const profiles = [
      engSum.profile(`${name}:eng`, dev0.target.device, lines[1].ms),
      pos0Sum.profile(`${name}:eng0`, dev0.target.device, lines[2].ms),
      own.sum.profile(`${name}:own`, dev0.target.device, own.line.ms),
    ].filter((p): p is Profile => p !== undefined);
    if (profiles.length) {
      console.log(`\n${entry} ${shape}: µs per launch by timestamps (eng: the Engine's recording at positions 0..${tokens - 1}; eng0: held at 0; own: own buffers at 0)`);
      // busy: from each dispatch's start to its end; the rest of an interval is the gap before the next starts
      const busy = (p: Profile) => p.rows.reduce((a, r) => a + r.count * r.busy, 0) / 1000;
      console.log(profiles.map((p) => `  ${p.backend}: ${p.deviceMs.toFixed(3)} ms of steps per token (${busy(p).toFixed(3)} ms busy), wall ${p.wallMs.toFixed(3)} ms`).join("\n"));
      console.log(kernelTable(profiles) + "\n");
    } else if (profile) console.log(`${entry} ${shape}: the device wrote no timestamps`);
  } catch (e) {
    console.log(`${entry} ${shape}: failed: ${(e as Error).stack ?? e}`);
  } finally {
    await eng.unload().catch((e) => console.log(`${entry} ${shape}: unload failed: ${(e as Error).message}`));
  }
}

/**
 * The plan over buffers of its own (bench/kernels.ts's allocProgram, random weights), recorded and replayed at
 * position 0 without the Engine: ms a token, the device's timestamps, and its memory while both sets are held.
 */
async function ownBuffers(dev0: Device, prog: Program, tokens: number): Promise<{ line: Line; sum: StepSum; memory?: MemoryReport }> {
  const bufs = allocProgram(dev0, prog, 0, "random");
  const sum = new StepSum(prog);
  let line: Line = { what: "own buffers", ms: NaN, waitMicros: NaN, hostMicros: NaN }, memory: MemoryReport | undefined;
  try {
    const own = dev0.record(deviceSteps(dev0, prog, bufs));
    try {
      for (let i = 0; i < 3; i++) {
        dev0.replay(own);
        await dev0.synchronize(60_000);
      }
      const t1 = performance.now();
      let wait = 0;
      for (let i = 0; i < tokens; i++) {
        dev0.replay(own);
        const w0 = performance.now();
        await dev0.synchronize(60_000);
        wait += performance.now() - w0;
        sum.add(dev0.stepTimes?.(own));
      }
      const ms = (performance.now() - t1) / tokens;
      line = { what: "own buffers", ms, waitMicros: wait / tokens * 1000, hostMicros: (ms - wait / tokens) * 1000 };
    } finally {
      dev0.releaseRecording(own);
    }
    memory = (dev0 as { memoryReport?: () => MemoryReport }).memoryReport?.();
  } finally {
    for (const b of bufs) dev0.free(b);
  }
  return { line, sum, memory };
}

/** µs per dispatch of a one-workgroup kernel, 400 in a recording: dependent (one buffer read and written by all) and independent. */
async function floorOf(entry: string): Promise<void> {
  const { name, opts } = backendVariant(entry, false);
  const dev = await probeBackend(name, opts);
  if (typeof dev === "string") {
    console.log(`${entry} floor: skipped: ${dev}`);
    return;
  }
  const b = new KernelBuilder("tiny", { workgroup: 32, grid: 1 });
  const y = b.buffer("y", "u32", "rw");
  b.if(b.lid.x.eq(0), () => b.store(y, 0, b.load(y, 0).add(1)));
  const k = b.build(), n = 400;
  const bufs = Array.from({ length: n }, () => dev.alloc(16, "device"));
  try {
    const c = dev.compile(k);
    for (const x of bufs) dev.write(x, 0, new Uint8Array(16));
    const step = (x: DeviceBuffer): DeviceStep => ({ k: "kernel", compiled: c, grid: [1, 1, 1], work: { bytes: 8, flops: 0 }, bindings: [{ buffer: x, offset: 0, bytes: 16 }] });
    const dep = await replayMicros(dev, Array.from({ length: n }, () => step(bufs[0])), 4, n);
    const ind = await replayMicros(dev, bufs.map(step), 4, n);
    console.log(`${entry} floor: ${dep.toFixed(2)} µs per dependent dispatch (a barrier before each), ${ind.toFixed(2)} µs per independent one`);
  } finally {
    for (const x of bufs) dev.free(x);
    await dev.destroy();
  }
}

async function main(args: string[]): Promise<number> {
  const { values } = parseFlags("bench/gap.ts", {
    args,
    options: { shape: { type: "string" }, backend: { type: "string" }, tokens: { type: "string" }, profile: { type: "boolean" }, cap: { type: "string" }, floor: { type: "boolean" } },
  });
  if (values.floor) {
    for (const b of (values.backend ?? "vulkan,wgpu").split(",")) await floorOf(b);
    return 0;
  }
  const shapes = (values.shape ?? "llama-3.2-1b").split(",");
  for (const s of shapes) if (!isShapeName(s)) throw new RangeError(`--shape: unknown shape ${s}`);
  const tokens = Number(values.tokens ?? 64), cap = Number(values.cap ?? 2048);
  if (!Number.isInteger(tokens) || tokens < 1 || tokens + 4 > cap) throw new RangeError(`--tokens: 1..${cap - 4}`);
  if (cap < 64) throw new RangeError("--cap: at least 64 (a phase holds the position at 48)");
  for (const shape of shapes) for (const b of (values.backend ?? "vulkan,wgpu").split(",")) await gapOf(b, shape, tokens, values.profile ?? false, cap);
  return 0;
}

if (import.meta.main) exit(await main(argv.slice(2)));
