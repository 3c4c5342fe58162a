// What a Driver is told and what it answers: the options of opening one and of one generation, the result of a
// generation, and the checks of a generation's options, made when the call is made (before it is queued), each
// failure an InvalidArgumentError naming the option.
import { InvalidArgumentError } from "./errors.ts";
import type { ResponseFormat } from "./grammar.ts";
import { GREEDY, type RowLogprobs, type SamplerParams, validateSampler } from "./sampling.ts";
import type { EncoderShapes } from "./encoder.ts";
import type { ImageInput, PromptInput } from "./vision.ts";

/** Tokens generated when a call does not say: the library's and the CLI's default. */
export const DEFAULT_MAX_TOKENS = 256;

/** Progress of loading and compiling, for a caller that shows it (the CLI prints it on a terminal). */
export type LoadProgress =
  | { phase: "load"; tensors: number; totalTensors: number; bytes: number; totalBytes: number }
  | { phase: "compile"; entries: number; totalEntries: number };

/** How a Driver is set up. */
export interface DriverOptions {
  /**
   * KV capacity in positions (default: the model's context length, at most 2048). Above the trained length
   * it is refused unless `allowLongContext`; one whose KV cache cannot fit the device is always refused.
   */
  ctx?: number;
  /** Allow a `ctx` above the context length the model was trained for (quality may suffer past it). */
  allowLongContext?: boolean;
  /**
   * Element type of the K/V cache (default "auto": f16 where the model's matrices are 16-bit or quantized, as
   * llama.cpp and `poot run` do, f32 where they are f32; kvTypeFor). f16 halves its memory and what attention
   * reads, and on a device with tensor-core tiles (ptx) decode attention runs on them.
   */
  kvDtype?: "f32" | "f16" | "auto";
  /**
   * Prefill row shapes prepared up front (default prefillDefault(): [2048, 512, 64, 16, 8] where the device
   * has tensor-core tiles and shared-memory staging or cooperative matrices, [512, 64, 16, 8] with tiles only, [512, 32, 8] on other
   * GPUs (the tiled matmul), [32, 8] on the JS device; 1 is always there: the decode step).
   */
  prefill?: number[];
  /**
   * What a prompt chunk's step costs besides its rows, in rows: a prompt runs as the cheapest chunks of the
   * prepared shapes, the last one padded to a wider shape where that is cheaper (planPrefill: a 300-token prompt
   * of the 8B on the H200 as one 512-row chunk, 18.1 ms, instead of 11 steps, 124.9 ms). Default 128 where the
   * device has tensor-core tiles (caps.mma: the H200 ran the 8B's 512-row chunk in 18.4 ms and its 2048-row one
   * in 64.8) or cooperative matrices, 0 elsewhere: whole chunks, widest first.
   */
  prefillStepRows?: number;
  /**
   * Decode steps a plain generation keeps in flight (greedy or the plain sampler: no grammar, logit bias, penalties,
   * min_tokens or logprobs), each reading the token its predecessor sampled on the device, so the device need
   * not wait for the host between tokens; tokens then reach the stream in runs of up to this many, the next run
   * already on the device while the host takes one (up to 32; past that one run at a time), and a generation that
   * ends early runs up to twice this many - 1 steps whose tokens are dropped. 1: one at a time. Default:
   * the device's (8 on WebGPU and ptx, 1 elsewhere: Device.stepsAhead); a tensor-parallel group runs one at a time.
   */
  stepsAhead?: number;
  /**
   * A decode step has a second entry for short contexts where the target's decode attention is two kernels (PTX):
   * one fused kernel while the row sees few positions (kernels/lower/attention.ts SHORT_DECODE: up to 128-256 of
   * them), ~2-5% faster there; where that covers the whole context, the step's one entry is compiled so. Default
   * on; false: the one entry as the target's default; a number: short entries for at most that many positions.
   */
  shortDecode?: boolean | number;
  /** Called as weights go to the device (per tensor) and as step shapes compile (per entry). */
  onProgress?: (p: LoadProgress) => void;
  /** An encoder model's (batch, seq) buckets compiled at open (default batches [1, 8, 32], seqs [32, 128, 512]). */
  encoder?: EncoderShapes;
}

/** Options of one generation. */
export interface GenerateOptions {
  /** Tokens to generate at most (default DEFAULT_MAX_TOKENS; 0 generates nothing). */
  maxTokens?: number;
  /** Generation ends before any of these strings would be emitted. */
  stop?: string[];
  /** Sampling parameters (default greedy). */
  sampler?: SamplerParams;
  /** Prepend BOS (default: the tokenizer's rule from the model metadata). */
  addBos?: boolean;
  /** Aborts the generation before its next token, or while it waits in the queue: AbortError. */
  signal?: AbortSignal;
  /** Keep generating past end-of-generation tokens (llama.cpp --ignore-eos): they are emitted like any other. */
  ignoreEos?: boolean;
  /**
   * Constrain the output: a JSON schema, any JSON object, or a GBNF/EBNF grammar (compiled by xgrammar; a bad
   * one rejects with a GrammarError). Generation ends when the grammar is complete and the model ends it.
   */
  format?: ResponseFormat;
  /**
   * Images of a vision-language model's prompt, in order: one per image placeholder token (`<image>`) in the
   * prompt, which expands to the image's rows (LLaVA layout). Decoded, resized and normalized as the model's
   * preprocessor config says; the projected rows replace the placeholders' embedding rows.
   */
  images?: ImageInput[];
  /** Embedding rows given by value in place of some prompt tokens' rows (generateWithInputs). */
  inputs?: PromptInput[];
  /**
   * Control tokens, by their text, that the output shows instead of dropping and that `format`'s grammar may spell:
   * a tool-call syntax's markers (llm/tools.ts syntaxMarkers: Mistral's "[TOOL_CALLS]"). A name the vocabulary does
   * not hold as one token is an InvalidArgumentError.
   */
  shownTokens?: string[];
}

/** Why generation ended. */
export type FinishReason = "eos" | "length" | "stop" | "context";

/** The whole result of one generation. */
export interface GenerateResult {
  /** The prompt's token ids (BOS included when added). */
  promptIds: number[];
  /** The generated ids (an end-of-generation token is not included). */
  generatedIds: number[];
  /** The generated text (equal to all streamed events' text joined). */
  text: string;
  /** Why generation ended. */
  finish: FinishReason;
  /** Per generated token, when the sampler asked for logprobs (SamplerParams.logprobs / topLogprobs). */
  logprobs?: RowLogprobs[];
  /** Wall times (ms) of the prompt and of generation, token counts, and decode tokens per second. */
  timings: { promptMs: number; generateMs: number; promptTokens: number; generatedTokens: number; tokensPerSecond: number };
}

/** Whether `x` is an integer. */
export function isInt(x: unknown): x is number {
  return typeof x === "number" && Number.isInteger(x);
}

/** A value for an error message: its type, or the value itself when short. */
export function describe(v: unknown): string {
  if (typeof v === "number") return String(v);
  if (typeof v === "string") return JSON.stringify(v.length > 40 ? v.slice(0, 40) + "..." : v);
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "an object" : typeof v;
}

/** A generation's options past the prompt, checked, with their defaults. */
export interface CheckedGenerate {
  maxTokens: number;
  sampler: SamplerParams;
  format: ResponseFormat | undefined;
  /** The stop strings as given (empty ones included). */
  stop: string[];
}

/** Checks maxTokens, the sampler (its logit bias inside `vocab`), format, stop and signal, in that order. */
export function checkGenerate(opts: GenerateOptions, vocab: number): CheckedGenerate {
  const maxTokens = opts.maxTokens ?? DEFAULT_MAX_TOKENS;
  if (!isInt(maxTokens) || maxTokens < 0) throw new InvalidArgumentError("maxTokens", `${describe(maxTokens)} is not an integer >= 0`);
  const sampler = opts.sampler ?? GREEDY;
  try {
    validateSampler(sampler);
  } catch (e) {
    throw new InvalidArgumentError("sampler", (e as Error).message);
  }
  const bias = sampler.logitBias instanceof Map ? [...sampler.logitBias.keys()] : Object.keys(sampler.logitBias ?? {}).map(Number);
  const outside = bias.find((t) => t >= vocab);
  if (outside !== undefined) throw new InvalidArgumentError("sampler", `logitBias token id ${outside} is outside the vocabulary (0 to ${vocab - 1})`);
  const format = opts.format;
  if (format !== undefined && (format === null || typeof format !== "object")) throw new InvalidArgumentError("format", `must be an object, got ${describe(format)}`);
  const stop = opts.stop ?? [];
  if (!Array.isArray(stop) || !stop.every((s) => typeof s === "string")) throw new InvalidArgumentError("stop", "must be an array of strings");
  if (opts.signal !== undefined && !(opts.signal instanceof AbortSignal)) throw new InvalidArgumentError("signal", "must be an AbortSignal");
  return { maxTokens, sampler, format, stop };
}
