// Streamed text of one sequence: tokens decoded incrementally (a UTF-8 character split across tokens waits; control
// tokens are no text, but for those `shown`), text that could still become a stop string held back, and generation
// cut before a stop string.
import type { StreamDecoder, Tokenizer } from "../tokenizer/mod.ts";

export class TextStream {
  private readonly decoder: StreamDecoder;
  /** Text emitted so far. */
  text = "";
  private pending = "";
  stopped = false;
  /** The stop string that ended it, once stopped. */
  stoppedBy?: string;

  constructor(tok: Tokenizer, prompt: readonly number[], private readonly stops: readonly string[], shown?: ReadonlySet<number>) {
    this.decoder = tok.decoder(shown ? { shown } : undefined);
    // The prompt goes through the decoder too, so a continuation's leading space is kept.
    for (const t of prompt) this.decoder.push(t);
  }

  /** Feeds a generated token; returns the text it releases (may be ""). Sets `stopped` on a stop string. */
  push(id: number): string {
    this.pending += this.decoder.push(id);
    const all = this.text + this.pending;
    let cut = -1;
    for (const s of this.stops) {
      const i = all.indexOf(s, Math.max(0, this.text.length - s.length));
      if (i >= 0 && (cut < 0 || i < cut)) cut = i, this.stoppedBy = s;
    }
    if (cut >= 0) {
      const piece = all.slice(this.text.length, cut);
      this.text = all.slice(0, cut);
      this.pending = "";
      this.stopped = true;
      return piece;
    }
    let hold = 0;
    for (const s of this.stops) hold = Math.max(hold, overlap(all, s));
    const emit = this.pending.slice(0, this.pending.length - hold);
    this.text += emit;
    this.pending = this.pending.slice(emit.length);
    return emit;
  }

  /** Ends the stream (not after a stop): the held-back text and bytes. */
  flush(): string {
    if (this.stopped) return "";
    const rest = this.pending + this.decoder.flush();
    this.pending = "";
    this.text += rest;
    return rest;
  }
}

/** Length of the longest suffix of `text` that is a proper prefix of `stop`. */
function overlap(text: string, stop: string): number {
  for (let n = Math.min(stop.length - 1, text.length); n > 0; n--) if (text.endsWith(stop.slice(0, n))) return n;
  return 0;
}
