// Helper for the tier-3 tests, run under Node: greedy generation with llama.cpp (node-llama-cpp 3.21.1, CPU,
// F32 KV cache, flash attention off, BOS prepended by the tokenizer's own rule), and for the first
// `logprob_prompts` prompts llama.cpp's log-softmax of the logits at several positions of that same sequence
// (prompt + generated tokens fed back): positions 0, 1, the last prompt token, then every `logprob_every`-th
// generated one. The probabilities come from llama.cpp's sampler at temperature 1 with top-k, top-p and min-p
// off, which is softmax(logits) over the whole vocabulary in f32; log(p) is llama.cpp's log-softmax.
// Reads {model, prompts: string[], tokens (a number, or one per prompt), ctx, logprob_prompts, logprob_every,
// logprob_positions (optional: per prompt, the positions to use instead)} on stdin; prints
// [{prompt_ids, generated_ids, logprobs: [{pos, values: number[vocab]}]}] on stdout.
import { getLlama } from "node-llama-cpp";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { model: path, prompts, tokens, ctx, logprob_prompts: lpPrompts = 0, logprob_every: every = 16, logprob_positions: lpAt } = JSON.parse(input);
const llama = await getLlama({ gpu: false, logLevel: "error", logger: () => {} });
const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
const vocab = model.tokens.vocabularySize ?? model.fileInsights.tensorInfo?.find((t) => t.name === "token_embd.weight")?.dims[1];
const out = [];
for (let pi = 0; pi < prompts.length; pi++) {
  const context = await model.createContext({
    contextSize: ctx, batchSize: ctx, flashAttention: false, threads: 2,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const seq = context.getSequence();
  const ids = [model.tokens.bos, ...Array.from(model.tokenize(prompts[pi], false))];
  const gen = [];
  for await (const t of seq.evaluate(ids, { temperature: 0 })) {
    if (model.isEogToken(t)) break;
    gen.push(t);
    if (gen.length >= (Array.isArray(tokens) ? tokens[pi] : tokens)) break;
  }
  const rec = { prompt_ids: ids, generated_ids: gen };
  if (pi < lpPrompts) {
    await seq.clearHistory();
    const all = [...ids, ...gen];
    const want = new Set(lpAt ? lpAt[pi] : [0, 1, ids.length - 1]);
    if (!lpAt) for (let p = ids.length - 1 + every; p < all.length - 1; p += every) want.add(p);
    const probs = { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } };
    const res = await seq.controlledEvaluate(all.map((t, p) => want.has(p) ? [t, { generateNext: probs }] : t));
    rec.logprobs = [];
    for (const p of [...want].sort((a, b) => a - b)) {
      const m = res[p]?.next?.probabilities;
      if (!m || (vocab && m.size !== vocab)) throw new Error(`position ${p}: ${m?.size} probabilities, vocabulary ${vocab}`);
      const values = new Array(m.size);
      for (const [tok, pr] of m) values[tok] = Math.log(pr);
      rec.logprobs.push({ pos: p, values });
    }
  }
  out.push(rec);
  await context.dispose();
}
await model.dispose();
process.stdout.write(JSON.stringify(out));
