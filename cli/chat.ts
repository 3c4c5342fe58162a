// The chat parts of the command line: `run --messages FILE.json` (an OpenAI-style messages array rendered with
// the model's template), `poot chat` (an interactive multi-turn session on stdin: replies stream, `/exit` or
// end of input ends it, Ctrl-C stops the current reply and keeps the session), and the model lines of `info`.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { ChatMessagesSchema, type ChatMessage, chatTokens } from "../llm/chat.ts";
import type { Driver, GenerateOptions } from "../llm/driver.ts";
import { ConfigError, LlmError } from "../llm/errors.ts";
import type { ModelHandle } from "../llm/model.ts";
import { opensInside, splitReasoning, thinkTags, type ThinkTags } from "../llm/reasoning.ts";
import { imageRows, type VisionInfo } from "../llm/families/vit.ts";
import { BACKEND_ORDER, probeBackend } from "../backends/open.ts";

/** Reads and validates a messages file (a ConfigError names the file and the bad field). */
export function readMessages(path: string): ChatMessage[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new LlmError(`${path}: cannot read messages file: ${(e as Error).message.split("\n")[0]}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(path, "", `not valid JSON (${(e as Error).message})`);
  }
  const r = ChatMessagesSchema.safeParse(json);
  if (!r.success) throw new ConfigError(path, r.error.issues[0].path.join("."), r.error.issues[0].message);
  return r.data as ChatMessage[];
}

/** Prompt ids of a messages file under the model's template with the generation prompt. */
export function messagesPrompt(model: ModelHandle, path: string): number[] {
  return chatTokens(model, readMessages(path), { addGenerationPrompt: true });
}

export interface ChatIO {
  write(s: string): void;
  /** Lines of user input; ends at end of input. */
  lines: AsyncIterable<string>;
  /** Registers the Ctrl-C handler for the session; returns its removal. */
  onInterrupt(f: () => void): () => void;
}

/** stdin/stdout with SIGINT, for Deno and Bun alike (node:readline and node:process work under both). */
export function stdio(write: (s: string) => void): ChatIO {
  const p = (globalThis as unknown as { process: { stdin: NodeJS.ReadableStream; on(e: string, f: () => void): void; off(e: string, f: () => void): void } }).process;
  const rl = createInterface({ input: p.stdin as never, terminal: false });
  return {
    write,
    lines: rl,
    onInterrupt(f) {
      p.on("SIGINT", f);
      return () => {
        p.off("SIGINT", f);
        rl.close();
      };
    },
  };
}

/**
 * The interactive session: each line is a user turn; the reply streams as it is generated and joins the
 * history. Ctrl-C during a reply stops it (what was generated is kept); at the prompt it ends the session.
 */
export async function chatSession(driver: Driver, io: ChatIO, opts: GenerateOptions & { system?: string }): Promise<void> {
  const history: ChatMessage[] = opts.system ? [{ role: "system", content: opts.system }] : [];
  const tags = thinkTags(driver.model.chatTemplate);
  let stopReply: (() => void) | undefined;
  let quit = false;
  const off = io.onInterrupt(() => {
    if (stopReply) stopReply();
    else quit = true;
  });
  try {
    io.write("> ");
    for await (const line of io.lines) {
      if (quit) break;
      const text = line.trim();
      if (text === "/exit" || text === "/quit") break;
      if (text === "") {
        io.write("> ");
        continue;
      }
      history.push({ role: "user", content: text });
      let stopped = false;
      stopReply = () => (stopped = true);
      let reply = "";
      // A thinking model's reply (printed as written) goes back as reasoning_content and content, as a server's
      // client sends it: templates that keep past reasoning take it from there, the rest drop it.
      const inside = tags !== undefined && opensInside(driver.chatPrompt(history), tags);
      try {
        const it = driver.chatStream(history, opts);
        let n = 0;
        for (let r = await it.next(); !r.done; r = await it.next()) {
          reply += r.value.text;
          io.write(r.value.text);
          // A device that resolves without leaving the microtask queue would hold off the SIGINT handler
          // until the reply ends: let the event loop run now and then.
          if (++n % 4 === 0) await new Promise((ok) => setTimeout(ok, 0));
          if (stopped) {
            await it.return?.(undefined as never);
            break;
          }
        }
      } catch (e) {
        if (!(e instanceof LlmError)) throw e;
        history.pop(); // a turn that cannot run (too long for the context) is dropped, the session goes on
        io.write(`\n[${e.message}]`);
        reply = "";
      } finally {
        stopReply = undefined;
      }
      if (reply || stopped) history.push(assistantTurn(reply, tags, inside));
      io.write(stopped ? " [stopped]\n> " : "\n> ");
    }
  } finally {
    off();
  }
}

/** A reply as the history's assistant turn: a think block split off as reasoning_content where the template has tags. */
function assistantTurn(reply: string, tags: ThinkTags | undefined, inside: boolean): ChatMessage {
  if (!tags) return { role: "assistant", content: reply };
  const s = splitReasoning(reply, tags, inside);
  return s.reasoning === null ? { role: "assistant", content: reply } : { role: "assistant", content: s.content, reasoning_content: s.reasoning };
}

/** The model lines of `poot info`: family, config, dtypes, parameters, bytes, context, template. */
export function modelLines(model: ModelHandle): string[] {
  const c = model.config;
  let params = 0, bytes = 0;
  const dtypes = new Map<string, number>();
  for (const name of new Set(model.map.values())) {
    const t = model.store.info(name)!;
    const n = t.shape.reduce((a, d) => a * d, 1);
    params += n;
    bytes += t.byteLength;
    dtypes.set(t.dtype, (dtypes.get(t.dtype) ?? 0) + n);
  }
  const quirks = [
    c.qkvBias && "q/k/v bias", c.qkNorm && "q/k norm", c.normOffset && "(1+w) norms", c.embedScale && "scaled embedding",
    c.act === "gelu" && "GeGLU", c.attnSoftcap && `attention softcap ${c.attnSoftcap}`, c.finalSoftcap && `logit softcap ${c.finalSoftcap}`,
    c.slidingWindow && `sliding window ${c.slidingWindow}${c.slidingLayers ? ` on ${c.slidingLayers.filter(Boolean).length} of ${c.layers} layers` : ""}`,
    (c.ropeFactors || c.ropeFreqFactors) && "rope scaling", c.ropeLocal && `local rope theta ${c.ropeLocal.theta}`,
  ].filter(Boolean);
  const fmt = (n: number) => (n >= 1e9 ? `${(n / 1e9).toFixed(2)}B` : n >= 1e6 ? `${(n / 1e6).toFixed(1)}M` : n >= 1e3 ? `${(n / 1e3).toFixed(1)}K` : `${n}`);
  return [
    `model ${model.path}`,
    `  name ${model.name ?? "(unnamed)"}, format ${model.format}, architecture ${model.arch}, family ${model.family.name}`,
    `  dim ${c.dim}, ${c.layers} layers, ${c.heads} heads / ${c.kvHeads} kv, head_dim ${c.headDim}, ffn ${c.hidden}, vocab ${c.vocab}, ` +
    (c.encoder
      ? `encoder: ${c.encoder.positions} absolute positions, ${c.encoder.typeVocab} token types, ${c.encoder.gelu} GELU, layernorm eps ${c.encoder.layerNormEps}, ` +
        (c.encoder.labels ? `classifier of ${c.encoder.labels} label(s)` : "no head")
      : `rope ${c.ropeStyle} theta ${c.ropeTheta}, rms_eps ${+c.rmsEps.toPrecision(6)}, ${c.tiedEmbeddings ? "tied" : "untied"} output`),
    ...(model.encoder ? [`  embeddings: ${model.encoder.pooling.pooling} pooling, ${model.encoder.pooling.normalize ? "L2-normalized" : "not normalized"} (${model.encoder.pooling.source})`] : []),
    ...(c.vision ? [visionLine(c.vision)] : []),
    `  ${quirks.length ? `quirks: ${quirks.join(", ")}` : "quirks: none"}`,
    `  parameters ${fmt(params)} (${[...dtypes].map(([d, n]) => `${d} ${fmt(n)}`).join(", ")}), ${(bytes / 2 ** 20).toFixed(1)} MiB of weights`,
    `  context ${model.contextLength ?? "not stated"}, chat template ${model.chatTemplate ? "yes" : "no"}, ` +
    `tokenizer ${model.tokenizer.model} ${model.tokenizer.vocabSize} tokens (bos ${model.tokenizer.bos ?? "-"}, eos ${model.tokenizer.eos ?? "-"}, end of generation ${[...model.tokenizer.eog].join(" ")})`,
  ];
}

function visionLine(v: VisionInfo): string {
  return `  vision: ${v.tower} tower ${v.dim} wide, ${v.featureLayer} of ${v.layers} layers run, ${v.heads} heads, ${v.imageSize}x${v.imageSize} images in ` +
    `${v.patchSize}x${v.patchSize} patches, ${imageRows(v)} rows per image (placeholder id ${v.imageToken}), ${v.act} MLP, ${v.projectorAct} projector`;
}

/** Which backends are present to run the model here (every family lowers on all of them). */
export async function backendLines(): Promise<string[]> {
  const out: string[] = [];
  for (const b of BACKEND_ORDER) {
    const d = await probeBackend(b).catch((e) => String((e as Error).message));
    if (typeof d === "string") out.push(`  ${b}: no (${d.split("\n")[0]})`);
    else {
      out.push(`  ${b}: yes, ${d.target.device}`);
      await d.destroy();
    }
  }
  return ["backends that can run it:", ...out];
}
