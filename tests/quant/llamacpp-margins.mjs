// Helper for tests/quant/tier3.test.ts, run under Node: llama.cpp's greedy tokens (node-llama-cpp, CPU, F32 KV
// cache, flash attention off, BOS prepended) with the top-two margin at each step: ln p1 − ln p2 of the
// temperature-1 distribution, which is the top-two logit gap. Reads {model, prompts, tokens, ctx} on stdin
// (or `seqs`: prompt token ids used as given, no BOS added; `ignoreEog`: generate past end-of-generation tokens);
// prints [{prompt_ids, generated_ids, margins, seconds}] (seconds: the runner-up token at each step).
import { getLlama } from "node-llama-cpp";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { model: path, prompts, seqs, tokens, ctx, ignoreEog } = JSON.parse(input);
const llama = await getLlama({ gpu: false, logLevel: "error", logger: () => {} });
const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
const out = [];
for (const p of seqs ?? prompts) {
  const context = await model.createContext({
    contextSize: ctx, batchSize: ctx, flashAttention: false, threads: 2,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const seq = context.getSequence();
  const ids = seqs ? p : [model.tokens.bos, ...Array.from(model.tokenize(p, false))];
  const gen = [], margins = [], seconds = [];
  for await (const r of seq.evaluateWithMetadata(ids, { probabilities: true }, { temperature: 0, yieldEogToken: ignoreEog === true })) {
    const it = r.probabilities.entries();
    const [t1, p1] = it.next().value;
    const second = it.next().value;
    if (model.isEogToken(t1) && !ignoreEog) break;
    gen.push(t1);
    margins.push(second ? Math.log(p1) - Math.log(second[1]) : Infinity);
    seconds.push(second ? second[0] : -1);
    if (gen.length >= tokens) break;
    // greedy: feed the top token back (the sampled one may differ at temperature 1)
    if (r.token !== t1) throw new Error(`greedy token ${r.token} is not the most probable ${t1}`);
  }
  out.push({ prompt_ids: ids, generated_ids: gen, margins, seconds });
  await context.dispose();
}
await model.dispose();
process.stdout.write(JSON.stringify(out));
