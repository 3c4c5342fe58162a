// A TokenStream: what Driver.stream returns. The generation runs in the driver's queue whether or not anyone
// reads, its events are buffered until read, and the final result is a promise on the stream, so both
//
//   for await (const e of s) out.write(e.text);  const r = await s.result;
//   const r = await s.result;                     // no iteration needed
//
// work. Leaving the loop early (break, throw) aborts the generation; `result` then rejects with AbortError.
// For code written against the older AsyncGenerator shape, `next()` ends with `{ done: true, value: result }`.

/** One streamed piece: a token and the text it releases (may be "" while text is held back). */
export interface TokenEvent {
  /** The token id (the end-of-generation token when it releases held-back text at the end). */
  id: number;
  /** Text this token releases; all events' text joined equals the result's text. */
  text: string;
  /** The token's logprob (raw logits), when the sampler asked for logprobs. */
  logprob?: number;
  /** The most likely tokens at this step with their logprobs, when the sampler asked for topLogprobs. */
  topLogprobs?: { id: number; logprob: number }[];
}

/** The streamed tokens of one generation, and its final result. */
export interface TokenStream<R> extends AsyncIterableIterator<TokenEvent, R, undefined> {
  /** The whole result once generation ends (rejects with the generation's error, AbortError included). */
  readonly result: Promise<R>;
}

/** The producer's side: push events, then end (the result promise settles by itself). */
export interface StreamSink {
  push(e: TokenEvent): void;
}

/**
 * Makes a stream whose events `run` pushes; `result` is `run`'s promise. `stop` is called when the reader
 * leaves early (return/throw) so the producer can abort.
 */
export function tokenStream<R>(run: (sink: StreamSink) => Promise<R>, stop: () => void): TokenStream<R> {
  const events: TokenEvent[] = [];
  let wake: (() => void) | undefined;
  let ended = false;
  const result = run({
    push(e) {
      events.push(e);
      wake?.();
    },
  });
  // Settled either way; a reader that never awaits `result` must not cause an unhandled rejection.
  result.then(() => {}, () => {}).finally(() => {
    ended = true;
    wake?.();
  });
  const stream: TokenStream<R> = {
    result,
    async next(): Promise<IteratorResult<TokenEvent, R>> {
      for (;;) {
        if (events.length) return { done: false, value: events.shift()! };
        if (ended) return { done: true, value: await result };
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    },
    async return(): Promise<IteratorResult<TokenEvent, R>> {
      stop();
      events.length = 0;
      const r = await result.catch(() => undefined);
      return { done: true, value: r as R };
    },
    async throw(e?: unknown): Promise<IteratorResult<TokenEvent, R>> {
      stop();
      events.length = 0;
      await result.catch(() => undefined);
      throw e;
    },
    [Symbol.asyncIterator]() {
      return stream;
    },
  };
  return stream;
}
