// What the full sampler costs per decode step at a real shape (default Llama 3.2 1B, 128k vocabulary, synthetic
// weights): step time (host + device, replayed) of
// the plain `sample` suffix (greedy, T 0.8) and the full entry as the Driver records it (logits_process +
// sample + logprobs, penalties over a counts row in device State that each step writes its token's word to), with the parameters of each row of KINDS:
// the full sampler (repetition/frequency/presence penalties, 50 logit-bias entries, top-5 logprobs; with and
// without top-p) and a JSON-schema mask from xgrammar each step (host: the matcher's bitmask over the 128k
// vocabulary and its advance; device: the mask applied), each as a fraction of greedy (issue 17's goals: full
// under +5%, json under +10%). The synthetic weights give nearly flat logits: top-p 0.95 keeps most of the
// vocabulary there, the sampler's slowest case (a real model's peaked rows take its candidate-list path). The vocabulary given to
// xgrammar is synthetic (256 byte tokens and 128k deterministic strings of letters, digits, punctuation and
// spaces): no 128k tokenizer travels with the repo.
//
//   deno run -A bench/sampler.ts --backend ptx --steps 64 [--sample-parts 1]
//   deno run -A bench/sampler.ts --backend js --shape stories260K --vocab 128256 --steps 16   (host columns)
import { parseFlags } from "./flags.ts";
import { Engine, type SlotValues } from "../backends/executor.ts";
import { type BackendChoice, openBackend } from "../backends/open.ts";
import { compileGraph } from "../kernels/lower.ts";
import { familyOf } from "../llm/registry.ts";
import { syntheticLlama } from "../llm/synthetic.ts";
import { appendSampler, COUNT_AT_SLOT, COUNT_VALUE_SLOT, countWord, MAX_LOGIT_BIAS, readSample, type SamplerParams, SamplerSlots, TokenHistory } from "../llm/sampling.ts";
import { xgrammar } from "../llm/grammar.ts";
import { BYTE_TO_CHAR } from "../llm/tokenizer/byte-level.ts";
import { SHAPES, type ShapeName } from "./shapes.ts";

const { values: o } = parseFlags("bench/sampler.ts", {
  options: {
    shape: { type: "string", default: "llama-3.2-1b" },
    backend: { type: "string", default: "auto" },
    steps: { type: "string", default: "64" },
    ctx: { type: "string", default: "1024" },
    // another vocabulary for the shape (e.g. stories260K with 128256 on the JS device: the host columns at
    // the real vocabulary without a 1B model)
    vocab: { type: "string" },
    // parts per row of the split sample kernels (1: one workgroup per row; default the library's choice)
    "sample-parts": { type: "string" },
  },
});
const named = SHAPES[o.shape as ShapeName];
if (!named) throw new Error(`--shape ${o.shape}: not one of ${Object.keys(SHAPES).join(", ")}`);
const vocab = o.vocab === undefined ? named.vocab : Number(o.vocab);
if (!(Number.isInteger(vocab) && vocab >= 1024 && vocab < 1 << 24)) throw new Error(`--vocab ${o.vocab}: want an integer in [1024, 2^24)`);
const c = { ...named, vocab };
const steps = Number(o.steps), cap = Number(o.ctx);
if (!(steps >= 4 && steps <= 4096 && cap >= 2 * steps + 600)) throw new Error(`--steps ${o.steps} / --ctx ${o.ctx}: need 4 <= steps <= 4096 and ctx >= 2·steps + 600`);

const model = syntheticLlama(c, { dtype: "bf16", scratch: true });
const dev = await openBackend(o.backend as BackendChoice);
const sampleParts = o["sample-parts"] === undefined ? undefined : Number(o["sample-parts"]);
if (sampleParts !== undefined && !(Number.isInteger(sampleParts) && sampleParts >= 1)) throw new Error(`--sample-parts ${o["sample-parts"]}: want an integer >= 1`);
const eng = new Engine(dev, { compile: (g, t) => compileGraph(g, t, { sampleParts }), timeoutMs: 120_000 });
const V = c.vocab, E = MAX_LOGIT_BIAS + 8; // as the Driver: bias and bans (penalties read device State)
console.log(`sampler bench: ${o.shape} (vocab ${V}) on ${dev.target.backend} ${dev.target.device}, ${steps} steps, ctx ${cap}, ${E} entries, sample parts ${sampleParts ?? "default"}`);
await eng.loadWeights(model.store, model.map);

function entry(full: boolean) {
  const { tracer, logits } = familyOf("llama").trace(c, { rows: 1, cap }, { dtypeOf: model.dtypeOf });
  appendSampler(tracer, logits, full ? { process: { entries: E, rows: { rows: 1, writes: 1 } }, logprobs: true } : {});
  return eng.addEntry(`sampler-bench:${full}`, tracer.build());
}
const greedyId = entry(false), fullId = entry(true);

// A synthetic 128k vocabulary for xgrammar, and a schema with strings, numbers, an enum and an array.
async function jsonMatcher() {
  const xg = await xgrammar();
  const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 {}[]\":,.-_";
  const enc: string[] = [];
  for (let b = 0; b < 256; b++) enc.push(BYTE_TO_CHAR[b]);
  let s = 12345;
  while (enc.length < V - 1) {
    let t = "";
    const n = 1 + (s % 7);
    for (let k = 0; k < n; k++) {
      s = (Math.imul(s, 1103515245) + 12345) >>> 0;
      t += alphabet[(s >>> 16) % alphabet.length];
    }
    enc.push([...new TextEncoder().encode(t)].map((b) => BYTE_TO_CHAR[b]).join(""));
  }
  enc.push(""); // the stop token
  const ti = await xg.TokenizerInfo.createTokenizerInfo(enc, "byte_level", false, V, [V - 1]);
  const gc = await xg.GrammarCompiler.createGrammarCompiler(ti);
  const t0 = performance.now();
  const cg = await gc.compileJSONSchema(JSON.stringify({
    type: "object",
    properties: { name: { type: "string" }, age: { type: "integer" }, tags: { type: "array", items: { type: "string" } }, kind: { enum: ["a", "b", "c"] } },
    required: ["name", "age", "tags", "kind"],
  }), false);
  console.log(`xgrammar: schema compiled for ${V} tokens in ${(performance.now() - t0).toFixed(0)} ms`);
  return { xg, cg, matcher: await xg.GrammarMatcher.createGrammarMatcher(cg) };
}

const history = new TokenHistory(Array.from({ length: 256 }, (_, i) => (i * 7919) % V));
for (let i = 0; i < 256; i++) history.add((i * 104729) % V);
const bias = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [(i * 2503) % V, (i % 5) - 2]));
const penalties: SamplerParams = { repeatPenalty: 1.1, frequencyPenalty: 0.5, presencePenalty: 0.5, logitBias: bias };

/** The rows of the table: which entry, which parameters, a JSON mask or not. */
const KINDS: Record<string, { full: boolean; p: SamplerParams; json?: boolean; shadow?: SamplerParams; what: string }> = {
  greedy: { full: false, p: { temperature: 0 }, what: "plain entry, temperature 0" },
  idle: { full: true, p: { temperature: 0 }, what: "full entry, temperature 0, nothing asked" },
  lp5: { full: true, p: { temperature: 0, topLogprobs: 5 }, what: "full entry, temperature 0, top-5 logprobs" },
  pen: { full: true, p: { temperature: 0, ...penalties }, what: "full entry, temperature 0, penalties + 50 bias" },
  // pen's host work (its slot values encoded, then discarded) with idle's device work: pen's cost split
  penh: { full: true, p: { temperature: 0 }, shadow: { temperature: 0, ...penalties }, what: "idle's slots after encoding pen's (pen's host cost alone)" },
  t08: { full: false, p: { temperature: 0.8, seed: 1 }, what: "plain entry, temperature 0.8" },
  full: { full: true, p: { temperature: 0.8, seed: 1, topLogprobs: 5, ...penalties }, what: "T 0.8 + penalties + bias + top-5 logprobs" },
  fullp: { full: true, p: { temperature: 0.8, topP: 0.95, seed: 1, topLogprobs: 5, ...penalties }, what: "full + top-p 0.95 (flat synthetic row)" },
  json: { full: true, p: { temperature: 0.8, seed: 1 }, json: true, what: "T 0.8 + JSON-schema mask (host matcher included)" },
};

interface Timing {
  ms: number;
  hostMaskMs: number;
  waitMs: number;
  /** The sampler's slot values (SamplerSlots.set/uploads, the counts word), per step. */
  prepMs: number;
  /** Executor.step: slot writes and the replay call. */
  submitMs: number;
  /** Executor.step after the wait (readbacks) and readSample (logprobs decoded as the Driver does). */
  readMs: number;
}

async function run(kind: string, n = steps): Promise<Timing> {
  const k = KINDS[kind];
  const slots = new SamplerSlots(1, V, E);
  const plain = new SamplerSlots(1, V, 0);
  const g = k.json ? await jsonMatcher() : undefined;
  let tok = 1, hostMask = 0, t0 = 0, wait = 0, prep = 0, submit = 0, read = 0, hostMaskStep = 0;
  for (let i = 0; i < n + 4; i++) {
    if (i === 4) t0 = performance.now(), hostMask = 0, wait = 0, prep = 0, submit = 0, read = 0;
    const p0 = performance.now();
    const pos = 600 + i;
    let sl: SlotValues;
    if (!k.full) {
      plain.set(0, k.p, pos);
      sl = { sampler: plain.words };
    } else {
      let mask: Uint32Array | undefined;
      if (g) {
        const h0 = performance.now();
        if (g.matcher.isTerminated()) g.matcher.reset();
        const m: Int32Array = await g.matcher.getNextTokenBitmask();
        mask = new Uint32Array(m.buffer, m.byteOffset, Math.ceil(V / 32));
        hostMaskStep = performance.now() - h0;
        hostMask += hostMaskStep;
      }
      if (k.shadow) {
        slots.set(0, k.shadow, pos, { history, eog: [V - 1], mask, countsRow: 0 });
        slots.uploads();
      }
      slots.set(0, k.p, pos, { history, eog: [V - 1], mask, countsRow: 0 });
      // as the Driver: the step writes its input token's word of the counts row
      sl = { ...slots.uploads(), [COUNT_AT_SLOT]: Int32Array.of(tok), [COUNT_VALUE_SLOT]: Uint32Array.of(countWord(history, tok)) };
    }
    const p1 = performance.now();
    prep += p1 - p0 - (g ? hostMaskStep : 0);
    const r = await eng.step(k.full ? fullId : greedyId, { token: new Int32Array([tok]), pos: new Int32Array([pos]), ...sl });
    wait += r.waitMicros / 1000;
    submit += (r.submitMicros ?? 0) / 1000;
    const s = readSample(r.outputs, undefined, k.full ? slots.words : plain.words);
    read += (r.hostMicros - r.waitMicros - (r.submitMicros ?? 0)) / 1000 + performance.now() - p1 - r.hostMicros / 1000;
    tok = s.tokens[0];
    if (g) {
      const h0 = performance.now();
      if (!g.matcher.acceptToken(tok)) throw new Error(`json: token ${tok} outside the grammar (mask not applied?)`);
      hostMask += performance.now() - h0;
    }
  }
  return { ms: (performance.now() - t0) / n, hostMaskMs: hostMask / n, waitMs: wait / n, prepMs: prep / n, submitMs: submit / n, readMs: read / n };
}

for (const kind of Object.keys(KINDS)) await run(kind, 4); // warm-up: first uses compile and JIT host code
const rows: string[] = [];
const greedy = await run("greedy");
for (const kind of Object.keys(KINDS)) {
  const r = kind === "greedy" ? greedy : await run(kind);
  const frac = r.ms / greedy.ms - 1;
  const f = (ms: number) => `${ms.toFixed(3)} ms`;
  rows.push(`${kind.padEnd(7)} ${r.ms.toFixed(3).padStart(8)} ms  ${((frac >= 0 ? "+" : "") + (100 * frac).toFixed(1) + "%").padStart(8)}  ${f(r.hostMaskMs)}  ${f(r.waitMs)}  ${f(r.ms - r.waitMs)}  ${f(r.prepMs)}  ${f(r.submitMs)}  ${f(r.readMs)}  ${KINDS[kind].what}`);
}
const again = await run("greedy"); // the same entry again: how much the table moves by itself
rows.push(`greedy  ${again.ms.toFixed(3).padStart(8)} ms  ${((again.ms / greedy.ms - 1) * 100).toFixed(1).padStart(7)}%  (again, at the end: the run-to-run noise)`);
// wait: the Engine's wait for the device per step (Executor StepResult.waitMicros); host: the rest of the step
// time (slot encoding, uploads, the replay call, readbacks, the matcher), where the sampler's host cost shows;
// of it, prep: the sampler's slot values; submit: Executor.step's slot writes and replay call; read: its
// readbacks and readSample (the rest of host is the matcher and the loop itself).
console.log(["kind    step time   vs greedy  host mask  wait       host       prep       submit     read       what", ...rows].join("\n"));
await eng.unload();
