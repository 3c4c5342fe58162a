// Host µs per token of what a server runs for each streamed sequence besides the step, as a reply grows: the stop
// strings' hold (llm/stops.ts through serve/text.ts, on stories260K's tokenizer), the think block's split
// (llm/reasoning.ts ReasoningStream) and the tool-call hold (serve/calls.ts CallStream, Hermes). Each row times
// `--window` pushes after `--at` pushes already made: a cost that grows with the reply shows as a row that grows.
//
//   deno run -A bench/reply_streams.ts                   bun bench/reply_streams.ts --at 0,20000,80000
import { intList, parseFlags } from "./flags.ts";
import { loadModel } from "../llm/model.ts";
import { TextStream } from "../llm/serve/text.ts";
import { ReasoningStream } from "../llm/reasoning.ts";
import { CallStream } from "../llm/serve/calls.ts";

const { values: o } = parseFlags("bench/reply_streams.ts", {
  options: {
    at: { type: "string", default: "0,20000,40000,80000" },
    window: { type: "string", default: "5000" },
  },
});
const at = intList("at", o.at, 0), window = intList("window", o.window)[0];

const m = loadModel(new URL("../models/stories260K/stories260K.gguf", import.meta.url).pathname);
const ids = m.tokenizer.encode(" Once upon a time there was a little girl named Lily. She liked to play in the park.", { addBos: false });
const piece = " word";

/** µs per push over `window` pushes, after `skip` pushes. */
function time(push: (i: number) => void, skip: number): number {
  for (let i = 0; i < skip; i++) push(i);
  const t0 = performance.now();
  for (let i = skip; i < skip + window; i++) push(i);
  return (performance.now() - t0) * 1000 / window;
}

const kinds: [string, () => (i: number) => void][] = [
  ["text, 2 stop strings", () => {
    const s = new TextStream(m.tokenizer, [1], ["\n\nUser:", "</s>"]);
    return (i) => s.push(ids[i % ids.length]);
  }],
  ["text, no stop string", () => {
    const s = new TextStream(m.tokenizer, [1], []);
    return (i) => s.push(ids[i % ids.length]);
  }],
  ["think block (open)", () => {
    const s = new ReasoningStream({ open: "<think>", close: "</think>" }, true);
    return () => s.push(piece);
  }],
  ["tool calls (hermes), text", () => {
    const s = new CallStream("hermes");
    return () => s.push(piece);
  }],
];
console.log(`| stream | ${at.map((n) => `µs/push at ${n}`).join(" | ")} |`);
console.log(`| --- | ${at.map(() => "---").join(" | ")} |`);
for (const [name, make] of kinds) console.log(`| ${name} | ${at.map((n) => time(make(), n).toFixed(2)).join(" | ")} |`);
m.close();
