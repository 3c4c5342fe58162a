// Helper for tests/quant/tier3.test.ts and tests/quant/families.test.ts, run under Node: llama.cpp's greedy
// tokens (node-llama-cpp, CPU, F32 KV cache, flash attention off) with the top-two margin at each step: ln p1 − ln p2
// of the temperature-1 distribution, which is the top-two logit gap. Reads on stdin either {model, prompts, tokens,
// ctx} (text prompts, BOS prepended) or {jobs: [{model, seqs, texts}], tokens, ctx, ignoreEog} (prompt token ids
// used as given; `ignoreEog`: generate past end-of-generation tokens; `texts` are only tokenized, special tokens
// parsed, no BOS; `threads`, default 2: 1 keeps ggml's spinning workers off a loaded machine). Prints [{prompt_ids, generated_ids, margins, seconds}] (seconds: the runner-up token at each
// step), or for `jobs` one {runs: [...], tokenized: [ids...]} per job.
import { getLlama } from "node-llama-cpp";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { model: path, prompts, jobs, tokens, ctx, ignoreEog, threads = 2 } = JSON.parse(input);
const llama = await getLlama({ gpu: false, logLevel: "error", logger: () => {} });

async function run(path, list, text, texts = []) {
  const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
  const tokenized = texts.map((t) => Array.from(model.tokenize(t, true)));
  const out = [];
  // One context per model (creating one costs more than these small models' steps); each sequence starts clear.
  const context = await model.createContext({
    contextSize: ctx, batchSize: ctx, flashAttention: false, threads,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const seq = context.getSequence();
  for (const p of list) {
    await seq.clearHistory();
    const ids = text ? [model.tokens.bos, ...Array.from(model.tokenize(p, false))] : p;
    const gen = [], margins = [], seconds = [];
    const opts = { temperature: 0, yieldEogToken: ignoreEog === true };
    for await (const r of seq.evaluateWithMetadata(ids, { probabilities: true }, opts)) {
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
  }
  await context.dispose();
  await model.dispose();
  return text ? out : { runs: out, tokenized };
}

const result = [];
if (jobs) for (const j of jobs) result.push(await run(j.model, j.seqs, false, j.texts));
process.stdout.write(JSON.stringify(jobs ? result : await run(path, prompts, true)));
