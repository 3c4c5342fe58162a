// Helper for the tier-3 test, run under Node: greedy generation with llama.cpp (node-llama-cpp 3.21.1, CPU,
// F32 KV cache, flash attention off, BOS prepended by the tokenizer's own rule). Reads
// {model, prompts: string[], tokens: number, ctx: number} on stdin; prints
// [{prompt_ids, generated_ids, margins}] on stdout (margins: top-1 minus top-2 logit at each generated token).
import { getLlama } from "node-llama-cpp";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { model: path, prompts, tokens, ctx } = JSON.parse(input);
const llama = await getLlama({ gpu: false, logLevel: "error", logger: () => {} });
const model = await llama.loadModel({ modelPath: path, gpuLayers: 0 });
const out = [];
for (const p of prompts) {
  const context = await model.createContext({
    contextSize: ctx, batchSize: ctx, flashAttention: false, threads: 2,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const seq = context.getSequence();
  const ids = [model.tokens.bos, ...Array.from(model.tokenize(p, false))];
  const gen = [];
  for await (const t of seq.evaluate(ids, { temperature: 0 })) {
    if (model.isEogToken(t)) break;
    gen.push(t);
    if (gen.length >= tokens) break;
  }
  out.push({ prompt_ids: ids, generated_ids: gen });
  await context.dispose();
}
await model.dispose();
process.stdout.write(JSON.stringify(out));
