// The step entries a Driver runs and the step itself. An entry is keyed by (program, step shape, sampling suffix,
// carried inputs) and added (compiled) the first time it is asked for; a step writes the slots, replays the
// entry and reads the sampled token back; a prompt runs as chunks of the prepared prefill row counts, planned by
// cost (planPrefill: the last chunk may be padded). Also the planning of those counts (prefillDefault) and of what
// sizes the context (contextRequest).
import { type EntryId, type Executor, MAX_INSTANCES, type StepOptions } from "../backends/executor.ts";
import type { Caps } from "../kernels/target.ts";
import { SHORT_DECODE, shortDecodeReach, tiledAuto } from "../kernels/lower.ts";
import { LlmError } from "./errors.ts";
import type { ModelHandle } from "./model.ts";
import { appendSampler, COUNT_AT_SLOT, COUNT_VALUE_SLOT, countWord, MAX_LOGIT_BIAS, readSample, type RowContext, type RowLogprobs, type SamplerParams, SamplerSlots } from "./sampling.ts";
import type { ContextRequest } from "./validate.ts";
import type { RowInputs } from "./vision.ts";
import { feedToken, SLOTS } from "./families/common.ts";
import type { DriverOptions } from "./options.ts";

/** A step that samples (decode, prefill chunks) or one that outputs the final hidden rows (encode). */
export type StepKind = "step" | "hidden";

/** A sampled token as the driver reads it back. */
export interface Next {
  token: number;
  nonFinite: boolean;
  logprobs?: RowLogprobs;
}

/** The entries of one model on one executor at one KV capacity, and the steps that run them. */
export class Steps {
  private readonly entries = new Map<string, EntryId>();
  /** The sampler's slots (one row), rewritten every step. */
  private readonly sampling: SamplerSlots;
  /**
   * Positions a one-row step may see while its short entry is the faster one (kernels/lower/attention.ts
   * SHORT_DECODE), 0: no short entries.
   */
  private readonly reach: number;
  /** The short entry of a one-row step's entry (run takes it while pos + 1 <= reach). */
  private readonly short = new Map<EntryId, EntryId>();

  /**
   * `prefillRows`: the prompt chunk row counts, widest first (1 is implied); `guard` throws where the model
   * cannot run a step entry (an encoder).
   */
  constructor(
    readonly model: ModelHandle,
    readonly exec: Executor,
    readonly ctx: number,
    readonly prefillRows: number[],
    private readonly guard: () => void,
    /** Element type of the K/V cache every entry shares. */
    readonly kvDtype: "f32" | "f16" = "f32",
    /** What a step costs besides its rows, in rows (planPrefill); 0: chunks are never padded. */
    readonly stepRows = 0,
    /** Chunks narrower than this run slower kernels (planPrefill's slowBelow). */
    readonly slowBelow = 0,
    /**
     * Decode steps kept in flight by a plain generation (AheadSteps); above 1 the plain 1-row step feeds its own
     * token (StepShape.feed), whoever runs it.
     */
    readonly ahead = 1,
    /**
     * One-row steps get a second entry for short contexts where it differs (shortDecodeReach); a number: at most
     * that many positions (DriverOptions.shortDecode).
     */
    shortDecode: boolean | number = false,
  ) {
    this.reach = shortReach(exec.targetSet().caps, model.config, ctx, kvDtype, shortDecode);
    // Entries for the bias and the min_tokens bans; the penalties read token counts in device State.
    this.sampling = new SamplerSlots(1, model.config.vocab, MAX_LOGIT_BIAS + model.tokenizer.eog.size);
  }

  /** The entry key of a step shape. */
  private key(kind: StepKind, rows: number, full: boolean, inputs: boolean): string {
    const tail = kind === "step" ? (full ? "sampler+full" : this.fed(kind, rows, full, inputs) ? "sampler+fed" : "sampler") : "hidden";
    return `${this.model.arch}:${kind}:rows=${rows}:cap=${this.ctx}:${tail}${inputs ? ":input_rows" : ""}${this.kvDtype === "f32" ? "" : `:kv=${this.kvDtype}`}`;
  }

  /** Whether a step shape's entry feeds its own token: the plain 1-row step, where steps run ahead. */
  private fed(kind: StepKind, rows: number, full: boolean, inputs: boolean): boolean {
    return this.ahead > 1 && kind === "step" && rows === 1 && !full && !inputs;
  }

  /**
   * The entry of a step shape, added (compiled) the first time. `full` adds the whole sampler (logits_process
   * with token counts in State, logprobs): a generation that asks for none of it runs the plain draw, which
   * is ~5% faster per step at the 1B shape (bench/sampler.ts) and uploads less per step.
   */
  entry(kind: StepKind, rows: number, full = false, inputs = false): EntryId {
    this.guard();
    const key = this.key(kind, rows, full, inputs);
    let id = this.entries.get(key);
    if (id !== undefined) return id;
    // A step that takes rows by value (an image's, generateWithInputs' rows) is its own entry (open prepares it for a VLM).
    const feed = this.fed(kind, rows, full, inputs);
    const { tracer, logits, hidden } = this.model.family.trace(this.model.config, { rows, cap: this.ctx, inputRows: inputs, kvDtype: this.kvDtype, feed }, { dtypeOf: this.dtypeOf });
    if (kind === "step") {
      // Sample from the last row only: a prefill chunk continues from its final position. Where the logits
      // are a plain matmul of the final hidden rows, only the last row goes through the vocabulary matmul (a
      // 256-row chunk would otherwise spend a quarter of a 1B model's prefill on logits nobody reads).
      const lm = tracer.nodes[logits.id];
      const x = lm.op === "matmul" ? tracer.nodes[lm.inputs[0]] : undefined;
      // The row is a slot: a padded chunk's last prompt row is not its last row (planPrefill).
      const at = rows === 1 ? undefined : tracer.slot(LAST_ROW_SLOT, { kind: "Input", dtype: "i32", shape: [1] });
      const last = !at ? logits
        : x && x.shape.length === 2 && x.shape[0] === rows
        ? tracer.label(tracer.matmul(tracer.gather(x, at), tracer.nodes[lm.inputs[1]]), "logits.last")
        : tracer.gather(logits, at);
      // Token counts live in device State (one counts row); each step writes the words of its input tokens
      // (run below): a prefill chunk's prompt marks, a decode step's input token (the previous draw) counted.
      // One scatter planned in place, where counting on the device took a dozen small kernels and three copies
      // of the State per step.
      const { sample } = appendSampler(tracer, last, full ? { process: { entries: this.sampling.entries, rows: { rows: 1, writes: rows } }, logprobs: true } : {});
      if (feed) feedToken(tracer, sample);
    } else {
      tracer.output("hidden", hidden);
    }
    const graph = tracer.build();
    // A one-row step compiled for short contexts too (the same slots, State and outputs): run picks it by
    // position; where it serves the whole context, it is the step's one entry.
    const short = this.reach > 0 && kind === "step" && rows === 1, whole = short && this.reach >= this.ctx;
    id = this.exec.addEntry(key, graph, whole ? SHORT_DECODE : undefined);
    this.entries.set(key, id);
    if (short && !whole) this.short.set(id, this.exec.addEntry(`${key}:short`, graph, SHORT_DECODE));
    return id;
  }

  private readonly dtypeOf = (role: { role: string; layer?: number }) => {
    const name = this.model.map.get(role.layer === undefined ? role.role : `${role.role}@${role.layer}`);
    const info = name === undefined ? undefined : this.model.store.info(name);
    if (!info) throw new LlmError(`model has no tensor for ${role.role}${role.layer === undefined ? "" : ` of layer ${role.layer}`}`);
    return info.dtype;
  };

  /** Runs prompt ids through the prepared shapes from position 0; returns the token sampled after the last. */
  async prefill(ids: number[], sampler: SamplerParams, ctx: RowContext, full: boolean, given?: RowInputs): Promise<Next> {
    let pos = 0;
    let last: Next = { token: -1, nonFinite: false };
    const D = this.model.config.dim;
    // rows given by value (an image's) keep whole chunks
    const plan = planPrefill(ids.length, this.prefillRows, this.ctx, given ? 0 : this.stepRows, this.slowBelow);
    for (const rows of plan) {
      const real = Math.min(rows, ids.length - pos);
      const use = given?.use.subarray(pos, pos + rows);
      const byValue = use !== undefined && use.some((u) => u === 1);
      const id = this.entry("step", rows, full, byValue);
      const extra = byValue ? { [SLOTS.inputRows]: given!.rows.subarray(pos * D, (pos + rows) * D), [SLOTS.inputUse]: use } : undefined;
      // Padding rows repeat the last prompt token past the prompt: their K/V land at positions a later step
      // writes before any row reads them (attention is causal), their prompt marks are skipped (run).
      const tokens = ids.slice(pos, pos + real);
      while (tokens.length < rows) tokens.push(ids[ids.length - 1]);
      // every chunk writes its tokens' prompt marks; only the last one's draw is a generated token
      last = await this.run(id, tokens, pos, sampler, ctx, extra, real);
      pos += real;
    }
    return last;
  }

  /** One step: writes the slots, replays, reads back the sampled token (and its logprobs when asked). */
  async run(
    id: EntryId, tokens: number[], pos: number, sampler: SamplerParams, ctx: RowContext, extra?: Record<string, ArrayBufferView>,
    real = tokens.length, opts?: StepOptions,
  ): Promise<Next> {
    // The draw's counter is the position it samples at: a seeded generation repeats exactly.
    this.sampling.set(0, sampler, pos + real - 1, { ...ctx, countsRow: 0 });
    // The counts row's words of this step's tokens, from the history (which already holds a decode step's
    // input token): the State was zeroed when the generation began, and every token it holds came in as one.
    // A padding row's word goes to index vocab, which no row reads.
    const h = ctx.history, V = this.model.config.vocab;
    const at = Int32Array.from(tokens, (t, i) => (h && i < real ? t : V));
    const value = Uint32Array.from(tokens, (t, i) => (h && i < real ? countWord(h, t) : 0));
    const short = this.short.get(id);
    const r = await this.exec.step(short !== undefined && pos + tokens.length <= this.reach ? short : id, {
      token: Int32Array.from(tokens),
      pos: new Int32Array([pos]),
      ...(tokens.length > 1 ? { [LAST_ROW_SLOT]: new Int32Array([real - 1]) } : {}),
      ...this.sampling.uploads(), // the mask slot only for a constrained row
      [COUNT_AT_SLOT]: at,
      [COUNT_VALUE_SLOT]: value,
      ...extra,
    }, opts);
    const s = readSample(r.outputs, undefined, this.sampling.words);
    return { token: s.tokens[0], nonFinite: s.nonFinite[0] === 1, logprobs: s.logprobs?.[0] };
  }
}

/**
 * A plain generation's decode steps with `steps.ahead` in flight: when none is queued, `next` launches a block of
 * steps, the one that consumes the given token and the ones after it (each on its own instance of the fed entry,
 * reading the token its predecessor left on the device), and returns their draws one by one in order. Once a
 * block's first draw is in, the next block is launched (on the other bank of instances, once the draws of the block
 * that last ran there are read; reading the token the last step before it left), so the device runs it while the
 * host consumes this block's draws: a WebGPU map waits
 * for every submitted step, so a block's first draw arrives only when the whole block is done, and without this
 * the GPU idled while the host took the draws and encoded the next block's first step. Steps launched past the
 * generation's end (an end-of-generation token, a stop string: up to two blocks) are waited out by `drain` and
 * their draws dropped; their K/V rows lie past the sequence, where the next step that reaches them overwrites
 * them before any row reads them.
 */
export class AheadSteps {
  private queue: Promise<Next>[] = [];
  /** Which bank of instances the next block takes (two banks of `steps.ahead` where MAX_INSTANCES has room). */
  private bank = 0;
  /** The draws of the block that last ran on each bank: a bank is launched again only once they are all read. */
  private readonly onBank: Promise<Next>[][] = [[], []];
  private closed = false;

  constructor(private readonly steps: Steps, private readonly id: EntryId, private readonly sampler: SamplerParams, private readonly ctx: RowContext) {}

  /** The draw of the step at `pos` that consumes `token`; `room`: steps the generation may still run (>= 1). */
  next(token: number, pos: number, room: number): Promise<Next> {
    if (this.queue.length === 0) this.block(token, pos, room);
    return this.queue.shift()!;
  }

  /** Launches the steps at pos, pos + 1, ... (up to steps.ahead, at most `room`), the first consuming `token`. */
  private block(token: number, pos: number, room: number): void {
    const per = this.steps.ahead, n = Math.max(1, Math.min(per, room));
    const banks = 2 * per <= MAX_INSTANCES ? 2 : 1, bank = this.bank++ % banks;
    const launched: Promise<Next>[] = [];
    // Steps.run launches before its first await: these are enqueued in order, now; `queued`: none waits before the
    // last is launched (where a device's wait spins, the first step's would run it alone before the second launched).
    for (let i = 0; i < n; i++) {
      const p = this.steps.run(this.id, [i === 0 ? token : -1], pos + i, this.sampler, this.ctx, undefined, 1, { instance: bank * per + i, queued: true });
      p.catch(() => {}); // awaited in its turn or by drain: not an unhandled rejection meanwhile
      launched.push(p);
    }
    this.queue.push(...launched);
    this.onBank[bank] = launched;
    if (banks === 1 || room <= n) return;
    // The next block, on the other bank once the block before it there has been read (its instances' outputs are
    // overwritten), goes out when this one's first draw is in, a microtask or two after the caller has it.
    const free = Promise.allSettled(this.onBank[1 - bank]);
    Promise.all([launched[0], free]).then(() => this.closed || this.block(-1, pos + n, room - n), () => {});
  }

  /** Waits for the steps still in flight (a generation that ended early); their draws and errors are dropped. */
  async drain(): Promise<void> {
    this.closed = true;
    const q = this.queue;
    this.queue = [];
    await Promise.allSettled(q);
  }
}

/**
 * Prefill chunk rows: wide chunks where matmuls run on tensor-core tiles (kernels/lib/mma_matmul.ts: a chunk of
 * 512 rows reads each weight once for 512 tokens; on the H200 a 2048-token prompt of the 1B took 56.6 ms in
 * 512-row chunks, 64.9 ms in 256-row ones) or on the shared-memory tiled matmul (kernels/lib/tiled_matmul.ts,
 * GPU targets without MMA: a 512-token prompt of the 1B on Vulkan on the H200 took 58 ms in one 512-row chunk,
 * 175 ms in 32-row chunks), the FMA kernel's sizes elsewhere (the JS device). With shared-memory staging
 * (kernels/lib/mma_staged.ts, flash_staged.ts) 2048-row chunks first: the 1B's 2048-token prompt took 38.8 ms in
 * one 2048-row chunk, 65.8 ms in 512-row ones (H200, session 6: the staged matmul reaches its speed at 2048 rows).
 * With cooperative matrices (caps.coop: Vulkan) the same as with staging: the 1B's 2048-token prompt on the H200's
 * Vulkan took 48.1 ms in 512-row chunks, its 2048-row chunk 38.0 (coop_matmul.ts, coop_flash.ts; session 22).
 */
export function prefillDefault(caps: Caps): number[] {
  if (caps.mma) return caps.staging ? [2048, 512, 64, 16, 8] : [512, 64, 16, 8];
  return caps.coop ? [2048, 512, 64, 16, 8] : tiledAuto(caps) ? [512, 32, 8] : [32, 8];
}

/** Short entries only where they would serve at least this many positions (each costs a compile and a recording). */
const MIN_REACH = 32;

/**
 * The positions a one-row step's short-context entry serves (kernels/lower/attention.ts shortDecodeReach, at most
 * the context and `limit` where that is a number), 0: none (false, or fewer than MIN_REACH). At the context's
 * length or more, it is the step's one entry.
 */
export function shortReach(
  caps: Caps, c: { heads: number; kvHeads: number; headDim: number }, ctx: number, kv: "f32" | "f16", limit: boolean | number = true,
): number {
  const reach = limit === false ? 0 : shortDecodeReach(caps, { heads: c.heads, kvHeads: c.kvHeads, hd: c.headDim, cap: ctx, kv });
  return reach >= MIN_REACH ? Math.min(reach, ctx, typeof limit === "number" ? limit : Infinity) : 0;
}

/** The slot naming the chunk row whose logits a step samples (a prefill chunk's last prompt row). */
export const LAST_ROW_SLOT = "last_row";

/**
 * The chunks (row counts of entries) that run `n` prompt tokens from position 0 with a context of `ctx`: the
 * cheapest sequence when a step of R rows costs `stepRows` + R, or stepRows + 6R for chunks narrower than
 * `slowBelow` (a step reads every weight once, whatever its rows; narrow chunks miss the fast kernels), where the
 * last chunk may be wider than what is left (padded: its rows past the prompt are ignored) if it fits the context.
 * `sizes`: the prepared row counts besides 1. With stepRows 0, whole chunks widest first, as before.
 * On the H200 the 8B's chunks took ~4.2 ms at 1 row, ~16 at 64 (mma_matmul.ts), 18.4 at 512 and 64.8 at 2048
 * (staged from 128 rows): ~0.03 ms a row, a step ~130 rows' worth, a 64-row chunk's rows ~6x dearer. A 300-token
 * prompt used to run 4 x 64 + 2 x 16 + 8 + 4 x 1 rows (11 steps, 124.9 ms), now one 512-row chunk (18.1 ms).
 */
export function planPrefill(n: number, sizes: readonly number[], ctx: number, stepRows: number, slowBelow = 0): number[] {
  const all = [...new Set([...sizes, 1])].filter((r) => r >= 1 && r <= ctx).sort((a, b) => b - a);
  if (stepRows <= 0) {
    const out: number[] = [];
    for (let left = n; left > 0;) {
      const r = all.find((x) => x <= left) ?? 1;
      out.push(r);
      left -= r;
    }
    return out;
  }
  // cost[m]: the cheapest way to run the last m tokens (they start at n - m); first[m]: its first chunk
  const cost = new Float64Array(n + 1), first = new Int32Array(n + 1);
  const step = (r: number) => stepRows + (r < slowBelow ? 6 * r : r);
  for (let m = 1; m <= n; m++) {
    let best = Infinity, pick = 1;
    for (const r of all) {
      const c = r <= m ? step(r) + cost[m - r] : n - m + r <= ctx ? step(r) : Infinity;
      if (c < best || (c === best && r <= m && pick > m)) [best, pick] = [c, r];
    }
    cost[m] = best;
    first[m] = pick;
  }
  const out: number[] = [];
  for (let m = n; m > 0; m -= Math.min(first[m], m)) out.push(first[m]);
  return out;
}

/**
 * The K/V cache's element type for "auto": f16 where the model's matrices are 16-bit or quantized (llama.cpp keeps
 * K/V in f16 whatever the weights, vLLM in the model's 16-bit type; a cache holds f32 or f16, and the attention on
 * tensor-core tiles reads 16-bit K/V), f32 where they are f32.
 */
export function kvTypeFor(model: Pick<ModelHandle, "map" | "store">): "f32" | "f16" {
  for (const name of model.map.values()) {
    const info = model.store.info(name);
    if (info && info.shape.length >= 2 && info.dtype !== "f32") return "f16";
  }
  return "f32";
}

/** DriverOptions.kvDtype resolved for a model (default "auto", as the command line and llama.cpp). */
export function kvDtypeOf(model: Pick<ModelHandle, "map" | "store">, opts: Pick<DriverOptions, "kvDtype">): "f32" | "f16" {
  const k = opts.kvDtype ?? "auto";
  return k === "auto" ? kvTypeFor(model) : k;
}

/**
 * What sizes the context on the device, for checkContext: K and V of every layer per position (in `kvDtype`, the
 * cache's element type), plus the attention scores of the widest prefill chunk (rows x heads per position, counted
 * twice for the softmax).
 */
export function contextRequest(model: ModelHandle, exec: Executor, opts: DriverOptions, kvDtype: "f32" | "f16"): ContextRequest {
  const c = model.config, kvBytes = kvDtype === "f16" ? 2 : 4;
  // Chunks of >= 16 rows on MMA tiles or cooperative matrices run a flash attention, which keeps no per-position
  // scores: their wide default chunks are counted as the 32 rows of the FMA path (so a context that fit still fits).
  const caps = exec.targetSet().caps;
  const rows = Math.max(1, ...(opts.prefill ?? prefillDefault(caps)).map((r) => (caps.mma || caps.coop) && r >= 16 ? Math.min(r, 32) : r));
  let fixed = 0;
  for (const name of model.map.values()) fixed += model.store.info(name)?.byteLength ?? 0;
  return {
    requested: opts.ctx,
    trained: model.contextLength,
    trainedKey: model.format === "gguf" ? `${model.arch}.context_length` : "config.json max_position_embeddings",
    allowLonger: opts.allowLongContext,
    bytesPerPosition: 2 * c.layers * c.kvHeads * c.headDim * kvBytes + 2 * rows * c.heads * 4,
    bufferBytesPerPosition: c.kvHeads * c.headDim * kvBytes,
    fixedBytes: fixed,
    target: exec.targetSet(),
  };
}
