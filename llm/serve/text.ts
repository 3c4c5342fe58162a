// Streamed text of one sequence: tokens decoded incrementally (a UTF-8 character split across tokens waits; control
// tokens are no text, but for those `shown`), text that could still become a stop string held back, and generation
// cut before a stop string (llm/stops.ts).
import { StopText } from "../stops.ts";
import type { StreamDecoder, Tokenizer } from "../tokenizer/mod.ts";

export class TextStream {
  readonly #decoder: StreamDecoder;
  readonly #out: StopText;

  constructor(tok: Tokenizer, prompt: readonly number[], stops: readonly string[], shown?: ReadonlySet<number>) {
    this.#decoder = tok.decoder(shown ? { shown } : undefined);
    // The prompt goes through the decoder too, so a continuation's leading space is kept.
    for (const t of prompt) this.#decoder.push(t);
    this.#out = new StopText(stops);
  }

  /** Text emitted so far. */
  get text(): string {
    return this.#out.text;
  }

  /** Whether a stop string ended it. */
  get stopped(): boolean {
    return this.#out.stopped;
  }

  /** The stop string that ended it, once stopped. */
  get stoppedBy(): string | undefined {
    return this.#out.stoppedBy;
  }

  /** Feeds a generated token; returns the text it releases (may be ""). Sets `stopped` on a stop string. */
  push(id: number): string {
    return this.#out.push(this.#decoder.push(id));
  }

  /** Ends the stream: the held-back text and bytes (up to a stop string they complete; "" after a stop). */
  flush(): string {
    return this.stopped ? "" : this.#out.push(this.#decoder.flush(), true);
  }
}
