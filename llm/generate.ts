// One generation, run from the Driver's queue: the prompt's prefill, then the per-token decode loop (sample,
// check end of generation and the grammar, decode the text, hold back what may start a stop string, stream
// it, step), timed, ending with why it ended. A bad token (non-finite logits, one outside the grammar) is an
// LlmError; an abort is an AbortError carrying the partial result.
import { setImmediate } from "node:timers";
import { AbortError, LlmError } from "./errors.ts";
import { compileFormat, Constraint, type ResponseFormat, type ThinkGate } from "./grammar.ts";
import { type RowContext, type RowLogprobs, type SamplerParams, TokenHistory } from "./sampling.ts";
import type { StreamSink } from "./stream.ts";
import type { RowInputs } from "./vision.ts";
import type { FinishReason, GenerateResult } from "./options.ts";
import { AheadSteps, type Steps } from "./steps.ts";
import { StopText } from "./stops.ts";

/** One generation's checked arguments. */
export interface GenerateJob {
  /** The prompt's token ids. */
  ids: number[];
  maxTokens: number;
  sampler: SamplerParams;
  /** The stop strings (empty ones never match: llm/stops.ts). */
  stops: string[];
  signal: AbortSignal;
  sink: StreamSink;
  ignoreEos: boolean;
  format: ResponseFormat | undefined;
  /** Control tokens the text shows and the format may spell (GenerateOptions.shownTokens). */
  shown?: ReadonlySet<number>;
  /** Where a thinking model's think block is free of the format's grammar (Driver.chat). */
  gate?: ThinkGate;
  /** Makes the prompt's rows given by value (images, generateWithInputs), when there are any. */
  given?: () => Promise<RowInputs>;
}

/** Runs one generation on `steps`; `closed` tells an abort by close() from the caller's own. */
export async function generateTokens(steps: Steps, closed: () => boolean, job: GenerateJob): Promise<GenerateResult> {
  const { ids, maxTokens, sampler, stops, signal, sink, ignoreEos, format, given, shown, gate } = job;
  const tok = steps.model.tokenizer;
  const generated: number[] = [];
  const logprobs: RowLogprobs[] = [];
  const out = new StopText(stops);
  let finish: FinishReason = "length";
  const t0 = performance.now();
  let t1 = t0;
  const result = (): GenerateResult => {
    const t2 = performance.now();
    return {
      promptIds: ids,
      generatedIds: [...generated],
      text: out.text,
      finish,
      ...(sampler.logprobs || sampler.topLogprobs ? { logprobs: [...logprobs] } : {}),
      timings: {
        promptMs: t1 - t0,
        generateMs: t2 - t1,
        promptTokens: ids.length,
        generatedTokens: generated.length,
        tokensPerSecond: generated.length > 1 ? (generated.length - 1) / ((t2 - t1) / 1000) : 0,
      },
    };
  };
  const aborted = () => {
    if (signal.aborted) throw new AbortError(closed() ? "aborted: the driver was closed" : "generation aborted", result());
  };
  if (maxTokens === 0) return result();
  // Penalties count the prompt and what is generated; a format's matcher masks every draw (grammar.ts).
  const history = new TokenHistory(ids);
  const constraint = format ? await Constraint.create(await compileFormat(tok, steps.model.config.vocab, format, shown), steps.model.config.vocab, gate) : undefined;
  const ctx = async (): Promise<RowContext> => ({ history, eog: tok.eog, mask: constraint ? await constraint.mask() : undefined });
  let ahead: AheadSteps | undefined;
  try {
    // Images are decoded and run through the tower first: a bad one fails before the KV state is touched.
    const rows = given && await given();
    steps.exec.resetState();
    const full = needsFullSampler(sampler, format);
    let next = await steps.prefill(ids, sampler, await ctx(), full, rows);
    t1 = performance.now();
    const decoder = tok.decoder(shown ? { shown } : undefined);
    // Decode the prompt through the streaming decoder so a continuation's leading space is kept.
    for (const t of ids) decoder.push(t);
    let pos = ids.length;
    // Releases what `piece` lets go (all of it when `last`, else what cannot start a stop string); true at a stop string.
    const release = (id: number, piece: string, last: boolean): boolean => {
      const emit = out.push(piece, last);
      if (out.stopped ? emit !== "" : emit || !last || generated.at(-1) === id) sink.push({ id, text: emit, ...lp(id) });
      return out.stopped;
    };
    // A token's logprobs ride on its event (not on the end-of-generation event that flushes held text).
    const lp = (id: number) => next.logprobs && generated.at(-1) === id ? { logprob: next.logprobs.logprob, topLogprobs: next.logprobs.top } : {};
    let yielded = performance.now(), polled = yielded;
    const step = steps.entry("step", 1, full); // looked up once, not per token
    // The plain sampler draws on the device from the position alone: its steps may run ahead of the host.
    ahead = !full && steps.ahead > 1 ? new AheadSteps(steps, step, sampler, await ctx()) : undefined;
    for (;;) {
      // A step may finish without ever returning to the event loop (a CPU device, a GPU wait that spins); let
      // timers (AbortSignal.timeout) run at least every 25 ms and I/O and signal handlers (Ctrl-C) every 250 ms
      // so that they can abort. setImmediate runs due timers; only a timer turn polls I/O in Deno, and Deno
      // rounds setTimeout(0) up to 1-2 ms: every 25 ms that was 5% of a GPU generation's time.
      const now = performance.now();
      if (now - yielded > 25) {
        if (now - polled > 250) {
          await new Promise((r) => setTimeout(r, 0));
          polled = performance.now();
        } else await new Promise((r) => setImmediate(r));
        yielded = performance.now();
      }
      aborted();
      if (next.nonFinite) throw new LlmError(`non-finite logits at position ${pos - 1}`);
      if (!ignoreEos && tok.isEog(next.token)) {
        // Text held back as a possible stop-string prefix, and the decoder's last bytes, still belong to the output.
        finish = release(next.token, decoder.flush(), true) ? "stop" : "eos";
        break;
      }
      if (constraint && !constraint.accept(next.token)) throw new LlmError(`token ${next.token} at position ${pos} is outside the grammar`);
      generated.push(next.token);
      history.add(next.token);
      if (next.logprobs) logprobs.push(next.logprobs);
      const last = generated.length >= maxTokens || pos >= steps.ctx;
      const piece = decoder.push(next.token) + (last ? decoder.flush() : "");
      if (release(next.token, piece, last)) {
        finish = "stop";
        break;
      }
      if (last) {
        finish = generated.length >= maxTokens ? "length" : "context";
        break;
      }
      next = ahead
        ? await ahead.next(next.token, pos, Math.min(maxTokens - generated.length, steps.ctx - pos))
        : await steps.run(step, [next.token], pos, sampler, await ctx());
      pos++;
    }
    return result();
  } finally {
    await ahead?.drain();
    constraint?.dispose();
  }
}

/** Whether a generation needs the full sampler entry (bias, bans, penalties, a format's mask, logprobs). */
function needsFullSampler(p: SamplerParams, format: ResponseFormat | undefined): boolean {
  const bias = p.logitBias instanceof Map ? p.logitBias.size : p.logitBias ? Object.keys(p.logitBias).length : 0;
  return format !== undefined || bias > 0 || (p.repeatPenalty ?? 1) !== 1 || (p.frequencyPenalty ?? 0) !== 0 ||
    (p.presencePenalty ?? 0) !== 0 || (p.minTokens ?? 0) > 0 || p.logprobs === true || (p.topLogprobs ?? 0) > 0;
}
