// The scheduling loop: admits requests into at most `slots` running sequences, and each step advances every
// running sequence with one replay of the batch entry of the next padded size: one row per decoding sequence,
// plus prefill chunks of fixed size (boundaries at multiples of the chunk, from the request alone) while rows
// are left, so a long prompt never stalls running streams. K/V blocks are allocated as positions need them;
// when none is left the newest sequence is preempted (its blocks freed) and recomputed from its tokens later,
// which gives the same tokens because a row's result does not depend on the batch (batch.ts).
// A cancelled sequence (client gone, abort) is dropped before the next step and its blocks freed.
import { LlmError } from "../errors.ts";
import type { ModelHandle } from "../model.ts";
import { penaltiesOn, type RowLogprobs, type SamplerParams, TokenHistory } from "../sampling.ts";
import type { Constraint } from "../grammar.ts";
import type { BatchRow, BatchRunner } from "./batch.ts";
import type { Metrics } from "./metrics.ts";
import { type BlockPool, prefixKey } from "./pool.ts";
import type { RowInputs } from "../vision.ts";
import { TextStream } from "./text.ts";
import { IoTurns } from "./turn.ts";

export type FinishReason = "stop" | "length";

export type SeqEvent =
  | { type: "token"; id: number; text: string; logprobs?: RowLogprobs }
  /**
   * The end: `tail` is text held back until now (an incomplete character, a stop-string prefix); `text` all of it;
   * `stop` the stop string that ended it.
   */
  | { type: "done"; finish: FinishReason; promptTokens: number; completionTokens: number; tail: string; text: string; tokenIds: number[]; stop?: string }
  | { type: "error"; error: Error };

export interface SubmitOptions {
  promptIds: number[];
  maxTokens: number;
  sampler: SamplerParams;
  stop?: string[];
  /** A grammar's matcher (llm/grammar.ts) that masks every draw; the sequence owns it (disposed at its end). */
  constraint?: Constraint;
  /** Prompt rows given by value (an image's rows, llm/vision.ts): such a prompt shares no cached prefix blocks. */
  rows?: RowInputs;
  /** Control tokens whose text the reply shows (a tool-call syntax's markers: llm/tools.ts). */
  shown?: ReadonlySet<number>;
}

/** The waiting queue is full: retry later. */
export class QueueFullError extends LlmError {
  constructor(readonly retryAfterSeconds: number) {
    super(`the server is at capacity (queue full): retry in ${retryAfterSeconds} s`);
  }
}
/** The server is shutting down and admits nothing new. */
export class ShuttingDownError extends LlmError {}
/** A request cancelled by the server (shutdown past its bound). */
export class CancelledError extends LlmError {}

/** Events of one sequence, in order; iterate them, or cancel() to drop the sequence within one step. */
export interface SequenceHandle extends AsyncIterable<SeqEvent> {
  readonly id: number;
  cancel(): void;
}

class Sequence implements SequenceHandle {
  readonly tokens: number[];
  readonly promptLen: number;
  readonly generated: number[] = [];
  /** What the penalties count: the prompt and the generated tokens. */
  readonly history: TokenHistory;
  computed = 0;
  blocks: number[] = [];
  /** Prefix-cache keys of the full blocks computed so far (block k's key at k). */
  keys: string[] = [];
  /** Its row of token counts in device State (counts.ts), while it runs with a penalty. */
  countRow?: number;
  cancelled = false;
  finished = false;
  readonly text: TextStream;
  readonly arrived = performance.now();
  lastTokenAt = 0;
  private queue: SeqEvent[] = [];
  private wake?: () => void;

  constructor(readonly id: number, readonly opts: SubmitOptions, model: ModelHandle, private readonly onCancel: () => void) {
    this.tokens = [...opts.promptIds];
    this.history = new TokenHistory(opts.promptIds);
    this.promptLen = opts.promptIds.length;
    this.text = new TextStream(model.tokenizer, opts.promptIds, opts.stop ?? [], opts.shown);
  }

  emit(e: SeqEvent): void {
    if (this.finished) return;
    if (e.type !== "token") {
      this.finished = true;
      this.opts.constraint?.dispose(); // the matcher's WASM memory, at the sequence's one terminal event
    }
    this.queue.push(e);
    this.wake?.();
  }

  cancel(): void {
    if (this.cancelled || this.finished) return;
    this.cancelled = true;
    // A terminal event, so that whoever still iterates ends instead of waiting for tokens that never come.
    this.emit({ type: "error", error: new CancelledError("the request was cancelled") });
    this.onCancel();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<SeqEvent> {
    try {
      for (;;) {
        while (this.queue.length) {
          const e = this.queue.shift()!;
          yield e;
          if (e.type !== "token") return;
        }
        await new Promise<void>((r) => this.wake = r);
        this.wake = undefined;
      }
    } finally {
      this.cancel(); // the consumer stopped early: nobody reads this sequence any more
    }
  }
}

export interface SchedulerOptions {
  slots: number;
  chunk: number;
  /** Most requests waiting for a slot; past it submit throws QueueFullError. */
  maxQueue: number;
  ctx: number;
  /** Share full prompt blocks between sequences with the same prefix (default true). */
  prefixCache?: boolean;
  /** Longest run of steps (ms) without a turn that lets the runtime poll sockets (default 5; turn.ts). */
  ioEveryMs?: number;
}

export class Scheduler {
  private waiting: Sequence[] = [];
  private running: Sequence[] = [];
  private nextId = 1;
  private accepting = true;
  private stopping = false;
  private loop?: Promise<void>;
  private wake?: () => void;
  /** Work that needs the executor between steps (a vision tower's step), run by the loop in order. */
  private jobs: { run: () => Promise<void>; fail: (e: Error) => void }[] = [];
  private readonly io: IoTurns;

  constructor(
    readonly model: ModelHandle,
    readonly runner: BatchRunner,
    readonly pool: BlockPool,
    readonly metrics: Metrics,
    readonly opts: SchedulerOptions,
  ) {
    this.io = new IoTurns(opts.ioEveryMs);
  }

  get queueDepth(): number {
    return this.waiting.length;
  }
  get runningCount(): number {
    return this.running.length;
  }
  get isAccepting(): boolean {
    return this.accepting;
  }

  /** Queues a request; its events arrive through the handle. */
  submit(opts: SubmitOptions): SequenceHandle {
    if (!this.accepting) throw new ShuttingDownError("the server is shutting down");
    if (this.waiting.length >= this.opts.maxQueue) throw new QueueFullError(Math.max(1, Math.ceil(this.waiting.length / this.opts.slots)));
    if (opts.promptIds.length === 0) throw new LlmError("empty prompt");
    if (opts.promptIds.length + opts.maxTokens > this.opts.ctx) {
      throw new LlmError(`prompt of ${opts.promptIds.length} tokens plus ${opts.maxTokens} new tokens exceeds the context of ${this.opts.ctx}`);
    }
    const s = new Sequence(this.nextId++, opts, this.model, () => this.kick());
    this.metrics.promptTokens += opts.promptIds.length;
    this.waiting.push(s);
    this.kick();
    this.start();
    return s;
  }

  /**
   * Runs `fn` on the executor between two steps: the loop owns the executor, so other work on it (a request's
   * images through the vision tower) must not interleave with a batch step.
   */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    if (!this.accepting) return Promise.reject(new ShuttingDownError("the server is shutting down"));
    return new Promise<T>((resolve, reject) => {
      this.jobs.push({ run: () => fn().then(resolve, reject), fail: reject });
      this.kick();
      this.start();
    });
  }

  private kick(): void {
    this.wake?.();
  }

  private start(): void {
    this.loop ??= this.run().catch((e) => {
      // The loop itself failed (a bug, not a request): fail everyone rather than hang them.
      for (const s of [...this.running, ...this.waiting]) s.emit({ type: "error", error: e as Error });
      this.running = [];
      this.waiting = [];
    }).finally(() => {
      this.loop = undefined;
      // The loop ended (shutdown): work still waiting for the executor will not run.
      for (const j of this.jobs.splice(0)) j.fail(new ShuttingDownError("the server is shutting down"));
    });
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      this.dropCancelled();
      while (this.jobs.length) await this.jobs.shift()!.run();
      while (this.waiting.length && this.running.length < this.opts.slots) this.admit(this.waiting.shift()!);
      if (this.running.length === 0) {
        if (this.jobs.length) continue;
        await new Promise<void>((r) => this.wake = r);
        this.wake = undefined;
        continue;
      }
      await this.step();
      // A step lets sockets be polled only where it parked (a GPU spins on its fence, the JS device computes).
      await this.io.between(this.runner.parkedAt);
    }
  }

  private dropCancelled(): void {
    for (const list of [this.running, this.waiting]) {
      for (let i = list.length - 1; i >= 0; i--) {
        const s = list[i];
        if (!s.cancelled && !s.finished) continue;
        this.release(s);
        list.splice(i, 1);
      }
    }
  }

  /** Frees what a sequence holds: its KV blocks and its counts row. */
  private release(s: Sequence): void {
    this.pool.release(s.blocks);
    s.blocks = [];
    s.keys = [];
    if (s.countRow !== undefined) this.runner.counts.release(s.countRow);
    s.countRow = undefined;
  }

  /** Into the batch, starting from the longest cached prefix of its tokens (whole blocks before its last token). */
  private admit(s: Sequence): void {
    this.running.push(s);
    // Running sequences never outnumber the rows (one per slot): a penalized one always gets one.
    if (penaltiesOn(s.opts.sampler)) s.countRow = this.runner.counts.acquire(s.history);
    // Image rows are not in the tokens a prefix key hashes (every placeholder is the same id): never shared.
    if (this.opts.prefixCache === false || s.blocks.length || s.opts.rows) return;
    const B = this.runner.opts.pool.block;
    const full = Math.floor((s.tokens.length - 1) / B);
    for (let k = 0; k < full; k++) {
      const key = prefixKey(s.keys[k - 1], s.tokens.slice(k * B, (k + 1) * B));
      const b = this.pool.share(key);
      if (b === undefined) break;
      s.blocks.push(b);
      s.keys.push(key);
    }
    s.computed = s.blocks.length * B;
    this.metrics.prefixHits += s.blocks.length;
  }

  /** Publishes the blocks a step filled, so later sequences with the same prefix share them. */
  private publish(s: Sequence): void {
    if (this.opts.prefixCache === false || s.opts.rows) return;
    const B = this.runner.opts.pool.block;
    for (let k = s.keys.length; k < Math.floor(s.computed / B); k++) {
      const key = prefixKey(s.keys[k - 1], s.tokens.slice(k * B, (k + 1) * B));
      this.pool.publish(s.blocks[k], key);
      s.keys.push(key);
    }
  }

  /** Frees the newest running sequence's blocks and puts it back in the queue (recomputed when readmitted). */
  private preemptNewest(): Sequence {
    const s = this.running.reduce((a, b) => (b.id > a.id ? b : a));
    this.running.splice(this.running.indexOf(s), 1);
    this.release(s);
    s.computed = 0;
    const at = this.waiting.findIndex((w) => w.id > s.id);
    this.waiting.splice(at < 0 ? this.waiting.length : at, 0, s);
    this.metrics.preemptions++;
    return s;
  }

  /** Blocks covering positions < end for s; false when s itself had to be preempted. */
  private ensureBlocks(s: Sequence, end: number): boolean {
    const B = this.runner.opts.pool.block;
    while (s.blocks.length * B < end) {
      const b = this.pool.alloc();
      if (b !== undefined) {
        s.blocks.push(b);
        continue;
      }
      if (this.preemptNewest() === s) return false;
    }
    return true;
  }

  private async step(): Promise<void> {
    const C = this.opts.chunk;
    const order = [...this.running].sort((a, b) => a.id - b.id); // oldest first: the newest gives way
    const decoders = order.filter((s) => s.tokens.length - s.computed === 1).length;
    let prefillBudget = this.runner.maxRows - decoders;
    const rows: BatchRow[] = [];
    const plan: { seq: Sequence; rows: number }[] = [];
    for (const s of order) {
      if (!this.running.includes(s)) continue; // preempted by an older one this step
      const pending = s.tokens.length - s.computed;
      const n = pending === 1 ? 1 : Math.min(C, pending);
      if (pending > 1 && n > prefillBudget) continue;
      // Sampled only once its counts row is written (a long prompt's marks may take more than one step).
      if (s.computed + n === s.tokens.length && s.countRow !== undefined && !this.runner.counts.ready(s.countRow)) continue;
      if (!this.ensureBlocks(s, s.computed + n)) continue;
      if (pending > 1) prefillBudget -= n;
      const sampler = s.opts.sampler;
      for (let i = 0; i < n; i++) rows.push({ token: s.tokens[s.computed + i], pos: s.computed + i, table: s.blocks, sampler, embedding: rowOf(s.opts.rows, s.computed + i, this.model.config.dim) });
      // The row that samples for real gets the sequence's tokens and, under a grammar, this step's mask.
      if (s.computed + n === s.tokens.length) {
        const mask = s.opts.constraint && !s.cancelled ? await s.opts.constraint.mask() : undefined;
        rows[rows.length - 1].ctx = { history: s.history, eog: this.model.tokenizer.eog, mask, countsRow: s.countRow };
      }
      plan.push({ seq: s, rows: n });
    }
    if (rows.length === 0 && !this.runner.counts.pending) return; // (a step of padding alone sends count writes)
    let out;
    try {
      const ends: number[] = [];
      let end = 0;
      for (const p of plan) ends.push(end += p.rows);
      out = await this.runner.step(rows, ends.map((e) => e - 1), { park: true });
    } catch (e) {
      // A failed step leaves the pool suspect: fail what ran, clear the state, keep serving.
      for (const { seq } of plan) {
        seq.emit({ type: "error", error: e as Error });
        this.release(seq);
      }
      this.running = this.running.filter((s) => !plan.some((p) => p.seq === s));
      try {
        this.runner.exec.resetState();
        for (const s of this.running) s.computed = 0, this.release(s);
        this.pool.forget();
        this.runner.counts.reset(); // the State is zeroed: rows are taken again and rewritten
        for (const s of this.running) if (penaltiesOn(s.opts.sampler)) s.countRow = this.runner.counts.acquire(s.history);
      } catch { /* a poisoned device: later steps fail the same way */ }
      return;
    }
    this.metrics.steps++;
    const now = performance.now();
    for (const [k, { seq, rows: n }] of plan.entries()) {
      const last = out[k];
      seq.computed += n;
      this.publish(seq);
      if (seq.cancelled || seq.computed < seq.tokens.length) continue; // a prefill chunk short of the end
      this.accept(seq, last.token, last.nonFinite, now, last.logprobs);
    }
  }

  private accept(s: Sequence, token: number, nonFinite: boolean, now: number, logprobs?: RowLogprobs): void {
    if (nonFinite) {
      s.emit({ type: "error", error: new LlmError(`non-finite logits at position ${s.tokens.length - 1}`) });
      return this.retire(s);
    }
    const tok = this.model.tokenizer;
    let finish: FinishReason | undefined;
    if (tok.isEog(token)) finish = "stop";
    else if (s.opts.constraint && !s.opts.constraint.accept(token)) {
      s.emit({ type: "error", error: new LlmError(`token ${token} at position ${s.tokens.length} is outside the grammar`) });
      return this.retire(s);
    } else {
      s.history.add(token);
      if (s.countRow !== undefined) this.runner.counts.generated(s.countRow, s.history, token);
      s.tokens.push(token);
      s.generated.push(token);
      this.metrics.generatedTokens++;
      if (s.generated.length === 1) this.metrics.ttft.observe((now - s.arrived) / 1000);
      else this.metrics.itl.observe((now - s.lastTokenAt) / 1000);
      s.lastTokenAt = now;
      const piece = s.text.push(token);
      s.emit({ type: "token", id: token, text: piece, ...(logprobs ? { logprobs } : {}) });
      if (s.text.stopped) finish = "stop";
      else if (s.generated.length >= s.opts.maxTokens || s.tokens.length > this.opts.ctx) finish = "length";
    }
    if (!finish) return;
    const tail = s.text.flush();
    s.emit({
      type: "done", finish, promptTokens: s.promptLen, completionTokens: s.generated.length, tail, text: s.text.text,
      tokenIds: [...s.generated], ...(s.text.stoppedBy !== undefined ? { stop: s.text.stoppedBy } : {}),
    });
    this.retire(s);
  }

  /** A finished sequence leaves the batch and frees its blocks at once. */
  private retire(s: Sequence): void {
    this.release(s);
    const i = this.running.indexOf(s);
    if (i >= 0) this.running.splice(i, 1);
  }

  /**
   * Stops admitting, lets running and queued work finish for up to `graceMs`, then cancels what is left with a
   * CancelledError event, and ends the loop. The caller then unloads the executor.
   */
  async shutdown(graceMs: number): Promise<void> {
    this.accepting = false;
    const deadline = performance.now() + graceMs;
    while ((this.running.length || this.waiting.length) && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    for (const s of [...this.running, ...this.waiting]) {
      s.emit({ type: "error", error: new CancelledError("the server shut down before this request finished") });
      this.release(s);
    }
    this.running = [];
    this.waiting = [];
    this.stopping = true;
    this.kick();
    await this.loop;
  }
}

/** The by-value row of prompt position `pos`, if the prompt gives one there. */
function rowOf(rows: RowInputs | undefined, pos: number, dim: number): Float32Array | undefined {
  return rows && pos < rows.use.length && rows.use[pos] === 1 ? rows.rows.subarray(pos * dim, (pos + 1) * dim) : undefined;
}
