// The batched step the server replays: N token rows, each with its own position, block-table row and sampler
// parameters, over the paged KV pool. One entry per padded size (1, 2, 4, ... slots, and slots + chunk: a full
// decode batch plus one prefill chunk), each recorded once; every per-request value is a slot value.
//
// Batch invariance: a row's result must not depend on the other rows or on N. The family's step is traced in
// its batched mode (per-row positions, paged_attention, which never splits a row), and the entries are compiled
// without the fused batch-1 gemv units (`servingCompile`), so every matmul, norm and attention row runs the
// same kernel code, in the same order, at every N. Padding rows write into block 0, the reserved trash block that
// no sequence owns (unused table entries point there too; the kernel never reads past a row's position).
import type { EntryId, Executor, HostArray, ProgramCompiler, SlotPrefix } from "../../backends/executor.ts";
import { compileGraph, type CompileOptions } from "../../kernels/lower.ts";
import type { Graph } from "../../graph/ir.ts";
import { LlmError } from "../errors.ts";
import { head, SLOTS } from "../families/common.ts";
import { dtypesFromStore } from "../families/family.ts";
import type { ModelHandle } from "../model.ts";
import {
  appendSampler, COUNT_AT_SLOT, COUNT_VALUE_SLOT, MAX_LOGIT_BIAS, readSample, type RowContext, type RowLogprobs, type SamplerParams, SamplerSlots,
} from "../sampling.ts";
import { CountRows } from "./counts.ts";
import type { PoolPlan } from "./pool.ts";

/** Slot naming the rows whose logits are sampled. */
export const SAMPLE_ROWS = "sample_rows";

/**
 * Compiles serving entries: no fused batch-1 gemv, and, where the target has tensor-core tiles, every bf16/f16
 * matmul on them at every entry size (batch 1 included: W read once per step for all rows, and a row's K order
 * fixed by the weight's shape alone), so a row computes the same bits at every batch size.
 * Not "auto" (MMA from MMA_MIN_ROWS rows), though the H200's batch-1 step was faster without MMA (1.78 vs
 * 1.89 ms): the MMA and FMA matmuls reduce a row in different orders (tensor-core k-groups and a K split vs
 * per-lane FMA chains), so a row's logits differ between them (316 of 320 logits of a tiny bf16 Llama at batch 1
 * on the JS device's emulated MMA, by up to 8e-6), and a sequence decoding alone (entry 1) would not get the
 * bits it gets in a full batch (entry 32): greedy tokens could flip, breaking batch invariance. The tiled matmul
 * (kernels/lib/tiled_matmul.ts, taken from TILED_MIN_ROWS rows) is off for the same reason: an entry of 64 rows
 * would reduce a row in another order than entry 1.
 */
export const servingCompile: ProgramCompiler = (g, t) => compileGraph(g, t, { gemv: false, mma: "all", tiled: false });

/** The compile options a serving run may vary (bench/serve.ts comparisons and tuning runs). */
export type ServingChoices = Pick<
  CompileOptions,
  "matmulTile" | "mmaSplit" | "mmaServing" | "mmaBlocks" | "coopServing" | "attentionSplits" | "attentionGroup" | "pagedUnroll" | "pagedTableInLanes" | "attentionPrefetch" | "pagedFlash" | "attentionStages"
> & { mma?: "all" | "off" };

/** servingCompile with other matmul and attention choices. */
export function servingCompileWith(o: ServingChoices): ProgramCompiler {
  return (g, t) => compileGraph(g, t, { ...o, gemv: false, mma: o.mma ?? "all", tiled: false });
}

export interface BatchRow {
  token: number;
  /** Position of this token in its sequence. */
  pos: number;
  /** The sequence's block table (pool block of each logical block), at least pos / block + 1 long. */
  table: readonly number[];
  sampler: SamplerParams;
  /** For the row that is sampled: the sequence's tokens (min_tokens), counts row (penalties) and grammar mask. */
  ctx?: RowContext;
  /** A row [dim] given by value in place of the token's embedding (an image's row; vision-language models). */
  embedding?: Float32Array;
}

export interface RowSample {
  token: number;
  nonFinite: boolean;
  /** When the row's sampler asked for logprobs. */
  logprobs?: RowLogprobs;
}

export interface BatchOptions {
  /** Most decode rows per step (running sequences). */
  slots: number;
  /** Rows of one prefill chunk. */
  chunk: number;
  pool: PoolPlan;
  /** Element type of the K/V pool (default f32; f16 halves what attention reads). */
  kvDtype?: "f32" | "f16";
  /**
   * Sampler entries per sampled row: logit bias and min_tokens bans (default MAX_LOGIT_BIAS + the tokenizer's
   * end-of-generation ids). The penalties read token counts in device State (counts.ts), never entries.
   */
  samplerEntries?: number;
  /** Token-count words the host may set per step (admissions' resets and prompts, generated tokens; default 256). */
  countWrites?: number;
}

/** Padded sizes: 1, 2, 4, ... up to slots (slots itself included), then slots + chunk. */
export function paddedSizes(slots: number, chunk: number): number[] {
  const s = new Set<number>();
  for (let n = 1; n < slots; n *= 2) s.add(n);
  s.add(slots);
  s.add(slots + chunk);
  return [...s].sort((a, b) => a - b);
}

/**
 * The graph of the entry of `rows` rows and its cache key (BatchRunner records it; bench/serve_kernels.ts lowers
 * it to time each kernel): the family's batched step over the paged pool, the logits of at most `slots` rows
 * picked by the `sample_rows` slot, and the sampler with `entries` bias entries per row and token counts.
 */
export function servingGraph(
  model: ModelHandle, rows: number, opts: Pick<BatchOptions, "slots" | "pool" | "kvDtype">, entries: number,
  counts: { rows: number; writes: number },
): { key: string; graph: Graph } {
  const { block, blocks, maxBlocks } = opts.pool;
  // A vision-language model's steps take rows by value (an image's rows in a prompt chunk; unused otherwise).
  const inputRows = model.config.vision !== undefined;
  const shape = { rows, cap: maxBlocks * block, kvDtype: opts.kvDtype, batch: { block, blocks, maxBlocks }, inputRows };
  const { tracer, logits } = model.family.trace(model.config, shape, { dtypeOf: dtypesFromStore(model.store, model.map) });
  // Only rows that end a sequence's part of the step are sampled (at most one per running sequence, so at
  // most `slots`): the logits matmul and the sampler run over those rows, picked by the `sample_rows` slot,
  // not over every prefill row. The unused full-width logits are dropped by DCE.
  const S = Math.min(rows, opts.slots);
  // the family's head (families/common.ts head: matmul(xf, out), soft-capped where the family says) over those rows
  let lm = tracer.nodes[logits.id];
  while (lm.op !== "matmul") lm = tracer.nodes[lm.inputs[0]];
  const [xf, out] = lm.inputs.map((i) => tracer.nodes[i]);
  const picked = tracer.gather(xf, tracer.slot(SAMPLE_ROWS, { kind: "Input", dtype: "i32", shape: [S] }));
  appendSampler(tracer, tracer.label(head(tracer, model.config, picked, out), "logits.sampled"), { process: { entries, rows: counts }, logprobs: true });
  const key = `${model.arch}:serve:rows=${rows}:block=${block}:blocks=${blocks}:tables=${maxBlocks}:kv=${opts.kvDtype ?? "f32"}` +
    `:sampler=${entries}:counts=${counts.rows}x${counts.writes}${inputRows ? ":input_rows" : ""}`;
  return { key, graph: tracer.build() };
}

export class BatchRunner {
  readonly sizes: number[];
  readonly maxRows: number;
  private readonly ids = new Map<number, EntryId>();
  private readonly samplers = new Map<number, SamplerSlots>();
  /** Slot bytes handed to the executor, and steps, since open (what a step uploads: bench/serve.ts). */
  readonly uploaded = { bytes: 0, steps: 0 };
  /** performance.now() after the last step whose wait parked the event loop (-Infinity: none yet). */
  parkedAt = -Infinity;
  /** The sequence slots' token counts on the device (one row per slot); the scheduler assigns the rows. */
  readonly counts: CountRows;
  private readonly entries: number;

  private constructor(readonly model: ModelHandle, readonly exec: Executor, readonly opts: BatchOptions) {
    this.sizes = paddedSizes(opts.slots, opts.chunk);
    this.maxRows = this.sizes[this.sizes.length - 1];
    this.counts = new CountRows(opts.slots, model.config.vocab, opts.countWrites ?? 256);
    this.entries = opts.samplerEntries ?? MAX_LOGIT_BIAS + model.tokenizer.eog.size;
  }

  /** Loads the weights (once per executor) and records every padded size up front. */
  static async open(model: ModelHandle, exec: Executor, opts: BatchOptions): Promise<BatchRunner> {
    if (!(Number.isInteger(opts.slots) && opts.slots >= 1)) throw new LlmError(`slots must be a positive integer, got ${opts.slots}`);
    if (!(Number.isInteger(opts.chunk) && opts.chunk >= 1)) throw new LlmError(`prefill chunk must be a positive integer, got ${opts.chunk}`);
    const r = new BatchRunner(model, exec, opts);
    await exec.loadWeights(model.store, model.map);
    for (const n of r.sizes) r.entry(n);
    return r;
  }

  private entry(rows: number): EntryId {
    let id = this.ids.get(rows);
    if (id !== undefined) return id;
    const { key, graph } = servingGraph(this.model, rows, this.opts, this.entries, { rows: this.counts.rows, writes: this.counts.writes });
    id = this.exec.addEntry(key, graph);
    this.ids.set(rows, id);
    return id;
  }

  /** The smallest padded size holding n rows. */
  sizeFor(n: number): number {
    const s = this.sizes.find((x) => x >= n);
    if (s === undefined) throw new RangeError(`${n} rows exceed the largest step of ${this.maxRows}`);
    return s;
  }

  /** The rows sampled per step in the entry of n rows. */
  sampledRows(n: number): number {
    return Math.min(this.sizeFor(n), this.opts.slots);
  }

  /**
   * Runs one step over these rows (padded to the next size); returns the samples of rows `sampleAt` (indices
   * into `rows`, at most `slots` of them), in that order. `park`: the wait for the device parks on a timer first
   * (Executor StepOptions.park; the scheduler's I/O turn inside the step), noted in `parkedAt`.
   */
  async step(rows: readonly BatchRow[], sampleAt: readonly number[], opts: { park?: boolean } = {}): Promise<RowSample[]> {
    const N = this.sizeFor(rows.length);
    const S = Math.min(N, this.opts.slots);
    if (sampleAt.length > S) throw new RangeError(`${sampleAt.length} sampled rows exceed the ${S} a step of ${N} rows samples`);
    const { block, maxBlocks } = this.opts.pool;
    const token = new Int32Array(N), pos = new Int32Array(N), write = new Int32Array(N);
    const table = new Int32Array(N * maxBlocks); // block 0 everywhere unused
    rows.forEach((r, i) => {
      const b = Math.floor(r.pos / block);
      if (!(r.pos >= 0 && b < maxBlocks && b < r.table.length)) throw new RangeError(`row ${i}: position ${r.pos} has no block`);
      token[i] = r.token;
      pos[i] = r.pos;
      for (let j = 0; j <= b; j++) table[i * maxBlocks + j] = r.table[j];
      write[i] = r.table[b] * block + (r.pos % block);
    });
    for (let i = rows.length; i < N; i++) write[i] = i % block; // the trash block
    const D = this.model.config.dim, byValue = this.model.config.vision !== undefined;
    const given = byValue ? new Float32Array(N * D) : undefined, use = byValue ? new Uint8Array(N) : undefined;
    rows.forEach((r, i) => {
      if (!r.embedding) return;
      if (!given || r.embedding.length !== D) throw new RangeError(`row ${i}: a row by value needs a vision-language model and ${D} values`);
      given.set(r.embedding, i * D);
      use![i] = 1;
    });
    const pick = new Int32Array(S);
    let sampler = this.samplers.get(S);
    if (!sampler) this.samplers.set(S, sampler = new SamplerSlots(S, this.model.config.vocab, this.entries));
    // Sampled rows with sampler entries (bias, min_tokens bans) take the first sampler rows, so the extra slot's
    // upload ends after theirs (SamplerSlots.uploads); slotOf[j] is where sampleAt[j] is sampled.
    const slotOf = sampleAt.map((_, j) => j);
    const hasEntries = (j: number) => { const p = rows[sampleAt[j]]?.sampler; return p?.logitBias !== undefined || (p?.minTokens ?? 0) > 0; };
    const order = [...slotOf].sort((a, b) => Number(hasEntries(b)) - Number(hasEntries(a)) || a - b);
    order.forEach((j, k) => slotOf[j] = k);
    for (let k = 0; k < S; k++) {
      const j = order[k];
      const i = j === undefined ? undefined : sampleAt[j];
      if (i === undefined) {
        sampler.set(k, {}, 0);
        continue;
      }
      if (!(i >= 0 && i < rows.length)) throw new RangeError(`sampled row ${i} is not one of the ${rows.length} rows`);
      pick[k] = i;
      // the draw's counter is the position it samples at, as the Driver does
      sampler.set(k, rows[i].sampler, rows[i].pos, rows[i].ctx);
    }
    this.counts.fill(); // the queued count writes go out with this step
    const slots: Record<string, HostArray | SlotPrefix> = {
      [SLOTS.token]: token,
      [SLOTS.pos]: pos,
      [SLOTS.blockTable]: table,
      [SLOTS.writeSlot]: write,
      [SAMPLE_ROWS]: pick,
      ...(given ? { [SLOTS.inputRows]: given, [SLOTS.inputUse]: use! } : {}),
      ...sampler.uploads(), // the mask slot: constrained rows' masks only
      [COUNT_AT_SLOT]: this.counts.at,
      [COUNT_VALUE_SLOT]: this.counts.value,
    };
    for (const v of Object.values(slots)) this.uploaded.bytes += ("prefix" in v ? v.prefix : v).byteLength;
    this.uploaded.steps++;
    const out = await this.exec.step(this.entry(N), slots, { park: opts.park });
    if (out.parkedMicros > 0) this.parkedAt = performance.now();
    const s = readSample(out.outputs, undefined, sampler.words);
    return slotOf.map((k) => ({ token: s.tokens[k], nonFinite: s.nonFinite[k] === 1, logprobs: s.logprobs?.[k] }));
  }
}
