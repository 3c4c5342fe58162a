// Helper for tokenizer-llamacpp.test.ts, run under Node: tokenizes texts with llama.cpp (node-llama-cpp, CPU,
// vocab only). Reads {models: {name: path}, texts: string[]} on stdin; prints
// {name: [[ids, idsParseSpecial, detokenized], ...]} on stdout. ids are llama_tokenize with add_special=false.
import { getLlama } from "node-llama-cpp";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { models, texts } = JSON.parse(input);
const llama = await getLlama({ gpu: false, logLevel: "error", logger: () => {} });
const out = {};
for (const [name, path] of Object.entries(models)) {
  const model = await llama.loadModel({ modelPath: path, vocabOnly: true });
  out[name] = texts.map((t) => {
    const ids = Array.from(model.tokenize(t, false));
    return [ids, Array.from(model.tokenize(t, true)), model.detokenize(ids, false)];
  });
  await model.dispose();
}
process.stdout.write(JSON.stringify(out));
