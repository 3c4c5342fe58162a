// bench/decode.ts on the JS device with tiny shapes: every field of the table is finite and sane, the table
// prints one row per shape, eager and replay agree, and the command line parses as documented.
import { test } from "node:test";
import assert from "node:assert/strict";
import { type BenchRow, H200_BANDWIDTH, parseBenchArgs, type Phase, runBench } from "../../bench/decode.ts";
import { paramCount, parseCustom, REAL_SHAPES, SHAPES } from "../../bench/shapes.ts";
import { JsDevice } from "../../backends/js/device.ts";
import { openBackend, probeBackend } from "../../backends/open.ts";
import { OutOfMemory, Unsupported } from "../../backends/errors.ts";
import { syntheticLlama } from "../../llm/synthetic.ts";
import { TimedDevice } from "../../bench/timed.ts";
import { Engine } from "../../backends/executor.ts";

const TINY = "dim=32,hidden=64,layers=2,heads=4,kvHeads=2,vocab=96,qkvBias=true,ropeStyle=half";

function positivePhase(p: Phase | undefined, what: string): void {
  assert.ok(p, what);
  for (const k of ["tokPerSec", "msPerToken", "hostMicros", "issueMicros", "engineMicros", "bytesPerToken", "rooflineMs", "rooflineFraction"] as const) {
    assert.ok(Number.isFinite(p[k]) && p[k] > 0, `${what}.${k} = ${p[k]}`);
  }
  assert.ok(Number.isFinite(p.waitMicros) && p.waitMicros >= 0, `${what}.waitMicros`);
  assert.ok(p.rooflineFraction < 1, `${what}: the JS device beats an H200's roofline?`);
  assert.ok(Math.abs(p.tokPerSec * p.msPerToken - 1000) < 1e-6 * 1000);
  assert.ok(p.tokenIds.every((t) => Number.isInteger(t) && t >= 0 && t < 96), `${what} tokens ${p.tokenIds}`);
}

test("runBench on the JS device: a custom shape and stories260K, every field finite and positive", async () => {
  const lines: string[] = [];
  const res = await runBench({
    shapes: [{ name: "custom", config: parseCustom(TINY) }, "stories260K"],
    backend: "js", tokens: 3, warmup: 1, deep: 20, deepTokens: 2, cap: 32, log: (l) => lines.push(l),
  });
  assert.equal(res.backend, "js");
  assert.match(res.device, /JavaScript/);
  assert.equal(res.bandwidth, H200_BANDWIDTH);
  // not an H200: the header says whose roofline it is
  assert.match(res.table.split("\n")[0], /roofline at 4\.27 TB\/s \(the H200's: --bandwidth sets this device's\)/);
  assert.equal(res.rows.length, 2);
  const [row] = res.rows as [BenchRow];
  assert.equal(row.error, undefined);
  assert.equal(row.shape, "custom");
  assert.equal(row.params, paramCount(row.config));
  assert.equal(row.weightBytes, syntheticLlama(row.config).bytes);
  // Tied: the table is read whole (logits) plus the gathered row.
  assert.ok(row.weightBytesPerToken > row.weightBytes);
  assert.equal(row.kvBytesPerPosition, 2 * 2 * 2 * 8 * 2);
  for (const k of ["loadSeconds", "compileSeconds", "planSeconds", "jitSeconds", "dispatches", "kernels", "plannedBytes"] as const) {
    assert.ok(Number.isFinite(row[k]) && row[k] > 0, `${k} = ${row[k]}`);
  }
  positivePhase(row.eager, "eager");
  positivePhase(row.replay, "replay");
  positivePhase(row.deep, "deep");
  assert.equal(row.replay!.pos, 0);
  assert.equal(row.replay!.tokens, 3);
  assert.equal(row.deep!.pos, 21, "the deep phase times after its warm-up tokens");
  assert.ok(row.deep!.bytesPerToken > row.replay!.bytesPerToken, "attention reads more K/V deeper in the context");
  assert.equal(row.eagerMatchesReplay, true);
  assert.equal(res.rows[1].shape, "stories260K");
  assert.equal(res.rows[1].error, undefined);
  const table = res.table.split("\n");
  assert.match(table[0], /backend js on JavaScript/);
  assert.match(table[1], /replay tok\/s/);
  assert.equal(table.length, 5);
  assert.match(table[3], /^custom\s+bf16/);
  assert.ok(!res.table.includes("NaN") && !res.table.includes("Infinity"));
  assert.ok(lines.some((l) => l.includes("compiled in")));
});

test("runBench: a failing shape is reported in its row and the next shape still runs", async () => {
  // A device with little memory: the 256 kB embedding of the first shape does not fit, the second's does.
  class SmallDevice extends JsDevice {
    override alloc(bytes: number, usage: "device" | "upload" | "readback") {
      if (bytes > 100_000) throw new OutOfMemory("js", bytes, "test device holds 100 kB per buffer");
      return super.alloc(bytes, usage);
    }
  }
  const bad = { ...parseCustom(TINY), vocab: 4096 };
  const res = await runBench({
    shapes: [{ name: "too-big", config: bad }, { name: "ok", config: parseCustom(TINY) }],
    open: () => Promise.resolve(new SmallDevice()), tokens: 2, warmup: 0, deep: 0, eager: false, cap: 8, log: () => {},
  });
  assert.ok(res.rows[0].error, "the oversized shape fails");
  assert.equal(res.rows[1].error, undefined);
  assert.equal(res.rows[1].eager, undefined);
  assert.equal(res.rows[1].deep, undefined);
  positivePhase(res.rows[1].replay, "replay");
  assert.match(res.table, /too-big: OutOfMemory/);
});

test("parseBenchArgs: defaults, shape lists, custom, flags", () => {
  const d = parseBenchArgs([]);
  assert.deepEqual(d.shapes, [...REAL_SHAPES]);
  assert.equal(d.backend, "auto");
  assert.equal(d.dtype, "bf16");
  assert.equal(d.kvDtype, "f16");
  assert.equal(d.eager, true);
  const o = parseBenchArgs(["--shape", "llama-3.2-1b,stories260K", "--backend", "ptx", "--tokens", "64", "--bandwidth", "3.35e12", "--no-eager", "--json"]);
  assert.deepEqual(o.shapes, ["llama-3.2-1b", "stories260K"]);
  assert.equal(o.backend, "ptx");
  assert.deepEqual(o.backends, ["ptx"]);
  assert.deepEqual(parseBenchArgs(["--backend", "ptx, vulkan,wgpu"]).backends, ["ptx", "vulkan", "wgpu"]);
  assert.throws(() => parseBenchArgs(["--backend", "ptx,cuda"]), /unknown backend "cuda"/);
  assert.equal(o.tokens, 64);
  assert.equal(o.bandwidth, 3.35e12);
  assert.equal(o.eager, false);
  assert.equal(o.json, true);
  const c = parseBenchArgs(["--custom", "dim=128,heads=4"]);
  assert.equal(c.shapes!.length, 1);
  const s = c.shapes![0] as { name: string; config: { dim: number; headDim: number } };
  assert.equal(s.name, "custom");
  assert.equal(s.config.dim, 128);
  assert.equal(s.config.headDim, 32);
  assert.throws(() => parseBenchArgs(["--tokens", "0"]), RangeError);
  assert.throws(() => parseBenchArgs(["--dtype", "q4_k"]), RangeError);
  assert.deepEqual(parseBenchArgs(["--plan-fuse", "off"]).compile, {
    attentionSplits: undefined, attentionUnroll: undefined, attentionFuse: undefined, quantizedX: undefined,
    gatherCast: false, outputsInPlace: false, normRope: false, normAdd: false,
  });
  assert.equal(parseBenchArgs([]).compile?.normRope, undefined);
  assert.throws(() => parseBenchArgs(["--plan-fuse", "maybe"]), RangeError);
  const one = parseBenchArgs(["--plan-fuse", "no-outputs-in-place,gather-cast,no-attention-fuse"]).compile!;
  assert.equal(one.outputsInPlace, false);
  assert.equal(one.gatherCast, true);
  assert.equal(one.attentionFuse, false);
  assert.equal(one.normRope, undefined, "a fusion not named keeps the lowering's default");
  assert.throws(() => parseBenchArgs(["--plan-fuse", "no-outputs"]), RangeError);
  assert.throws(() => parseCustom("dim=64,heads=3"), RangeError);
  assert.throws(() => parseCustom("width=3"), RangeError);
});

test("shapes: the issue's dimensions and byte sizes", () => {
  const gb = (n: string) => syntheticLlama(SHAPES[n as keyof typeof SHAPES]).bytes / 1e9;
  assert.equal(paramCount(SHAPES["llama-3.2-1b"]), 1_235_814_400);
  assert.equal(paramCount(SHAPES["qwen2.5-0.5b"]), 494_032_768);
  assert.equal(paramCount(SHAPES["llama-3-8b"]), 8_030_261_248);
  assert.ok(Math.abs(gb("llama-3-8b") - 16.06) < 0.01);
});

test("openBackend: js opens, an unknown name and an absent backend say why", async () => {
  const d = await openBackend("js");
  assert.equal(d.target.backend, "js");
  await d.destroy();
  await assert.rejects(openBackend("nope" as "js"), Unsupported);
  // Absent here (no AMD GPU agent); on a machine with one, it opens.
  const rocm = await probeBackend("rocm");
  if (typeof rocm === "string") await assert.rejects(openBackend("rocm"), (e: Error) => e instanceof Unsupported && /rocm/.test(e.message));
  else await rocm.destroy();
});

test("TimedDevice passes on the schedule the Engine reads: a bench's Driver keeps the device's steps in flight", () => {
  // A JS device with a GPU's schedule: bench/driver.ts's default ran one step at a time while TimedDevice hid it.
  const inner = Object.assign(new JsDevice(), { stepsAhead: 8, autonomous: true });
  const timed = new TimedDevice(inner);
  assert.equal(timed.stepsAhead, 8);
  assert.equal(timed.autonomous, true);
  const compile = () => {
    throw new Error("nothing is compiled here");
  };
  assert.equal(new Engine(timed, { compile }).stepsAhead(), 8);
  assert.equal(new Engine(new TimedDevice(new JsDevice()), { compile }).stepsAhead(), 1);
});
