// backends/bytes.ts allZero, which decides whether a PTX or Vulkan write becomes a fill: checked against a plain
// byte loop at every start phase and length around the word boundaries, with one non-zero byte at each place.
import { test } from "node:test";
import assert from "node:assert/strict";
import { allZero } from "../../backends/bytes.ts";

test("allZero: equals a byte loop at every alignment, length and non-zero position", () => {
  const buf = new ArrayBuffer(64);
  let cases = 0;
  for (let start = 0; start < 8; start++) {
    for (let len = 0; len <= 40; len++) {
      const view = new Uint8Array(buf, start, len);
      new Uint8Array(buf).fill(7); // bytes outside the view are not zero: they must not be read as its own
      view.fill(0);
      assert.equal(allZero(view), true, `zeros at ${start}+${len}`);
      for (let at = 0; at < len; at++) {
        view[at] = 0x80;
        assert.equal(allZero(view), false, `byte ${at} of ${start}+${len}`);
        view[at] = 0;
        cases++;
      }
    }
  }
  assert.ok(cases > 5000);
});
