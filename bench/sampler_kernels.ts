// Device time per kernel of the sampler suffix alone (no model): logits f32 [1, V] from a slot (a peaked row
// like a real model's, or a flat one) into the plain entry (sample) or the full entry (logits_process with
// counts in State, sample, logprobs), with real slot values per kind, so the data-dependent kernels take the
// path they take in a token. For each kind: µs per replay of the whole suffix (replays queued back to back),
// and each kernel's µs per launch (launched `launches` times back to back in one recording, on the same
// buffers: the gap between dependent launches included, as in a token).
//
// --rows R (a serving batch) repeats the row R times, each with its own counts row.
//
// --no-lean and --subgroup-list N are A/Bs of the pick kernel (SampleShape.lean, .subgroupList); --kinds picks kinds.
//
//   deno run -A bench/sampler_kernels.ts --backend ptx [--vocab 128256] [--rows 1] [--sample-parts 1] [--flat] [--no-bracket]
//     [--no-lean] [--subgroup-list 512] [--kinds greedy,tkp]
import { parseFlags } from "./flags.ts";
import { type BackendChoice, openBackend } from "../backends/open.ts";
import type { DeviceBuffer, DeviceStep } from "../backends/device.ts";
import { compileGraph } from "../kernels/lower.ts";
import { Tracer } from "../graph/tracer.ts";
import { appendSampler, COUNT_AT_SLOT, COUNT_VALUE_SLOT, countWord, MAX_LOGIT_BIAS, type SamplerParams, SamplerSlots, TokenHistory } from "../llm/sampling.ts";
import { allocProgram } from "./profile.ts";
import { replayMicros } from "./kernels.ts";

const { values: o } = parseFlags("bench/sampler_kernels.ts", {
  options: {
    backend: { type: "string", default: "auto" },
    vocab: { type: "string", default: "128256" },
    "sample-parts": { type: "string" },
    flat: { type: "boolean", default: false },
    // the sample kernel without its top-p bracket path (kernels/lib/sample_bracket.ts): an A/B of fullp
    "no-bracket": { type: "boolean", default: false },
    "no-lean": { type: "boolean", default: false },
    "subgroup-list": { type: "string" },
    kinds: { type: "string" },
    rows: { type: "string", default: "1" },
    launches: { type: "string", default: "100" },
  },
});
const V = Number(o.vocab), launches = Number(o.launches), R = Number(o.rows);
if (!(Number.isInteger(R) && R >= 1 && R <= 256)) throw new Error(`--rows ${o.rows}: want 1..256`);
const sampleParts = o["sample-parts"] === undefined ? undefined : Number(o["sample-parts"]);
if (!(Number.isInteger(V) && V >= 2 && V < 1 << 24)) throw new Error(`--vocab ${o.vocab}: want an integer in [2, 2^24)`);
if (!(Number.isInteger(launches) && launches >= 1 && launches <= 10000)) throw new Error(`--launches ${o.launches}: want 1..10000`);
if (sampleParts !== undefined && !(Number.isInteger(sampleParts) && sampleParts >= 1)) throw new Error(`--sample-parts ${o["sample-parts"]}: want an integer >= 1`);
const E = MAX_LOGIT_BIAS + 8;
const dev = await openBackend(o.backend as BackendChoice);
const subgroupList = o["subgroup-list"] === undefined ? undefined : Number(o["subgroup-list"]);
if (subgroupList !== undefined && !(Number.isInteger(subgroupList) && subgroupList >= 0)) throw new Error(`--subgroup-list ${o["subgroup-list"]}: want an integer >= 0`);
console.log(`sampler kernels: ${R} x vocab ${V} on ${dev.target.backend} ${dev.target.device}, ${o.flat ? "flat" : "peaked"} logits, sample parts ${sampleParts ?? "default"}${o["no-bracket"] ? ", no top-p bracket" : ""}${o["no-lean"] ? ", not lean" : ""}${subgroupList !== undefined ? `, subgroup list ${subgroupList}` : ""}`);

// Logits: a normal tail (std 1.5, or 0.05 when flat) with a few strong tokens, by a fixed LCG.
const logits = new Float32Array(V);
let s = 987654321;
const rnd = () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
for (let i = 0; i < V; i++) {
  const g = Math.sqrt(-2 * Math.log(rnd() + 1e-12)) * Math.cos(2 * Math.PI * rnd());
  logits[i] = (o.flat ? 0.05 : 1.5) * g + (!o.flat && rnd() < 0.001 ? 8 * rnd() : 0);
}

function program(full: boolean) {
  const t = new Tracer();
  t.slot("token", { kind: "Input", dtype: "i32", shape: [1] });
  const x = t.slot("logits", { kind: "Input", dtype: "f32", shape: [1, V] });
  // the full entry as the Driver (one counts row, one write per step) or the server (a row per sequence) records it
  appendSampler(t, R > 1 ? t.broadcast(x, [R, V]) : x, full ? { process: { entries: E, rows: { rows: R, writes: R } }, logprobs: true } : {});
  return compileGraph(t.build(), dev.target, { sampleParts, sampleBracket: !o["no-bracket"], sampleLean: !o["no-lean"], sampleSubgroupList: subgroupList });
}

const history = new TokenHistory(Array.from({ length: 256 }, (_, i) => (i * 7919) % V));
for (let i = 0; i < 256; i++) history.add((i * 104729) % V);
const bias = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [(i * 2503) % V, (i % 5) - 2]));
const pen: SamplerParams = { repeatPenalty: 1.1, frequencyPenalty: 0.5, presencePenalty: 0.5, logitBias: bias };
const mask = new Uint32Array(Math.ceil(V / 32)).map((_, i) => (i * 2654435761) >>> 0); // about half allowed

const KINDS: Record<string, { full: boolean; p: SamplerParams; mask?: boolean }> = {
  greedy: { full: false, p: { temperature: 0 } },
  t08: { full: false, p: { temperature: 0.8, seed: 1 } },
  // the Driver's usual chat filter, no penalties (bench/driver.ts --sample)
  tkp: { full: false, p: { temperature: 0.8, topK: 40, topP: 0.95, seed: 1 } },
  tp: { full: false, p: { temperature: 0.8, topP: 0.95, seed: 1 } },
  // a longer candidate list (~1800 logits on the peaked row): the pick kernel's workgroup path, or --subgroup-list
  k400: { full: false, p: { temperature: 0.8, topK: 400, seed: 1 } },
  idle: { full: true, p: { temperature: 0 } },
  full: { full: true, p: { temperature: 0.8, seed: 1, topLogprobs: 5, ...pen } },
  fullp: { full: true, p: { temperature: 0.8, topP: 0.95, seed: 1, topLogprobs: 5, ...pen } },
  fullk: { full: true, p: { temperature: 0.8, topK: 40, seed: 1, topLogprobs: 5, ...pen } },
  json: { full: true, p: { temperature: 0.8, seed: 1 }, mask: true },
};

const progs = { plain: program(false), full: program(true) };
const only = o.kinds?.split(",");
for (const bad of only?.filter((k) => !(k in KINDS)) ?? []) throw new Error(`--kinds: no kind ${bad} (${Object.keys(KINDS).join(", ")})`);
for (const [kind, k] of Object.entries(KINDS)) {
  if (only && !only.includes(kind)) continue;
  const prog = k.full ? progs.full : progs.plain;
  const slots = new SamplerSlots(R, V, k.full ? E : 0);
  for (let r = 0; r < R; r++) slots.set(r, { ...k.p, seed: r }, 700, k.full ? { history, eog: [V - 1], mask: k.mask ? mask : undefined, countsRow: r } : {});
  const at = Int32Array.from({ length: R }, (_, r) => r * V + 7), value = Uint32Array.from({ length: R }, () => countWord(history, 7));
  const vals: Record<string, ArrayBufferView> = { ...slots.values(), logits, token: Int32Array.of(1), [COUNT_AT_SLOT]: at, [COUNT_VALUE_SLOT]: value };
  const bufs = allocProgram(dev, prog);
  try {
    for (const pb of prog.buffers) {
      const v = pb.kind === "slot" ? vals[pb.name] : undefined;
      if (v) dev.write(bufs[pb.id], 0, new Uint8Array(v.buffer, v.byteOffset, Math.min(v.byteLength, pb.bytes)));
    }
    const bind = (bd: { buffer: number; offset: number; bytes: number }) => ({ buffer: bufs[bd.buffer] as DeviceBuffer, offset: bd.offset, bytes: bd.bytes });
    const steps: DeviceStep[] = prog.steps.map((st): DeviceStep =>
      st.k === "kernel"
        ? { k: "kernel", compiled: dev.compile(st.kernel), grid: st.grid, work: st.work, bindings: st.bindings.map(bind) }
        : { k: "copy", src: bind(st.src), dst: bind(st.dst), work: st.work }
    );
    const whole = await replayMicros(dev, Array.from({ length: launches }, () => steps).flat(), 3, launches);
    const rows: string[] = [];
    for (const [i, st] of steps.entries()) {
      const us = await replayMicros(dev, Array.from({ length: launches }, () => st), 3, launches);
      const ps = prog.steps[i];
      rows.push(`  ${(ps.k === "kernel" ? ps.kernel.name : "copy").slice(0, 60).padEnd(60)} ${us.toFixed(2).padStart(8)} µs`);
    }
    console.log(`${kind.padEnd(6)} ${whole.toFixed(2).padStart(8)} µs per suffix (${steps.length} steps)  ${JSON.stringify(k.p, (key, v) => key === "logitBias" ? "50 entries" : v)}${k.mask ? " + mask" : ""}`);
    console.log(rows.join("\n"));
  } finally {
    for (const b of bufs) dev.free(b);
  }
}
