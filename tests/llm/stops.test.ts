// llm/stops.ts against a reference that reads the whole text each push (what the Driver and the server did before
// the window): random texts over a small alphabet (so stop strings and their prefixes recur, overlap and straddle
// pieces), random stop lists (one, several, overlapping, one inside another) and random cuts, including the `last`
// push. Each push must release exactly what the reference does; the released text, the stop string and the state
// after a stop likewise.
import { test } from "node:test";
import assert from "node:assert/strict";
import { StopText } from "../../llm/stops.ts";

/** The whole-text rule: a stop string is searched in everything so far, what may start one is held back. */
class Whole {
  text = "";
  pending = "";
  by?: string;
  constructor(readonly stops: string[]) {}
  push(piece: string, last: boolean): string {
    if (this.by !== undefined) return "";
    this.pending += piece;
    const all = this.text + this.pending;
    let cut = -1;
    for (const s of this.stops) {
      const i = all.indexOf(s);
      if (i >= 0 && (cut < 0 || i < cut)) cut = i, this.by = s;
    }
    if (cut >= 0) {
      const out = all.slice(this.text.length, cut);
      this.text = all.slice(0, cut);
      this.pending = "";
      return out;
    }
    let hold = 0;
    if (!last) {
      for (const s of this.stops) for (let n = Math.min(s.length - 1, all.length); n > hold; n--) if (all.endsWith(s.slice(0, n))) hold = n;
    }
    const out = this.pending.slice(0, this.pending.length - hold);
    this.text += out;
    this.pending = this.pending.slice(out.length);
    return out;
  }
}

test("stop strings: a window's releases equal the whole text's, push by push", () => {
  let seed = 12345;
  const rand = (n: number) => Math.floor((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31 * n); // high bits: an LCG's low bits cycle
  const word = (len: number) => Array.from({ length: len }, () => "abc\n"[rand(4)]).join("");
  let stopped = 0, pushes = 0;
  for (let round = 0; round < 3000; round++) {
    const stops = Array.from({ length: rand(4) }, () => word(1 + rand(5)));
    if (round % 7 === 0) stops.push(""); // ignored, as the server and the Driver ignore it
    const text = word(rand(60));
    const a = new StopText(stops), b = new Whole(stops.filter((s) => s.length > 0));
    let at = 0;
    while (at < text.length || at === 0) {
      const next = Math.min(text.length, at + rand(6));
      const last = next === text.length && rand(2) === 0;
      assert.equal(a.push(text.slice(at, next), last), b.push(text.slice(at, next), last), JSON.stringify({ stops, text, at, next, last }));
      pushes++;
      at = next;
      if (at === text.length) break;
    }
    assert.equal(a.text, b.text, JSON.stringify({ stops, text }));
    assert.equal(a.stoppedBy, b.by);
    assert.equal(a.stopped, b.by !== undefined);
    if (a.stopped) stopped++, assert.equal(a.push("more", true), "");
  }
  // the random cases reach both ends: texts cut at a stop string, and texts released whole
  assert.ok(stopped > 500 && stopped < 2500, `${stopped} of 3000 stopped`);
  assert.ok(pushes > 10000);
});
