// bench/boundary.ts's chains and kernels, checked where no GPU is needed: each shape's chain reads the bytes
// bench/decode.ts counted for that shape's bf16 weights on the H200 (988.21 MB, 2.47 GB) plus one 128 KiB
// attention read a layer, and the variants differ where they say they do (the early stream's loads before
// griddepcontrol.wait, the prefetching chain's next-stream loads before its barrier's release, the megakernel
// chain's waits per --dep); ptxas, where present, assembles the megakernel chain in each mode.
import { test } from "node:test";
import assert from "node:assert/strict";
import { boundaryPtx, chainOf, type MegaDep, megaPtx } from "../../bench/boundary_ptx.ts";
import { assemble, findPtxas } from "../ptx/ptxas.ts";

test("chainOf: a decode step's bf16 weight bytes, stream by stream", () => {
  for (const [shape, weights] of [["qwen2.5-0.5b", 988.21e6], ["llama-3.2-1b", 2.47e9]] as const) {
    const c = chainOf(shape);
    assert.equal(c.layer.length, 5);
    const total = c.layers * c.layer.reduce((a, b) => a + b, 0) + c.head - c.layers * (128 << 10);
    // decode.ts's figure also holds the norms and (qwen) the q/k/v biases: well under 0.5%
    assert.ok(Math.abs(total - weights) / weights < 0.005, `${shape}: ${total} bytes against ${weights}`);
    for (const b of [...c.layer, c.head]) assert.equal(b % 16, 0);
  }
});

test("boundaryPtx: where the loads sit against the wait and the barrier", () => {
  const U = 4, k = boundaryPtx(U);
  const loads = (s: string) => (s.match(/ld\.global\.nc\.v4/g) ?? []).length;
  for (const t of [64, 256]) {
    const pdl = k.stage(false, t), early = k.stage(true, t);
    assert.equal(pdl.split("griddepcontrol.wait")[0].match(/ld\.global\.nc\.v4/g), null);
    assert.equal(loads(early.split("griddepcontrol.wait")[0]), U);
    assert.equal(loads(pdl), loads(early));
    assert.match(pdl, new RegExp(`mad\\.lo\\.u32 %r4, %r2, ${t}, %r1`));
  }
  const persist = k.chain(false), prefetch = k.chain(true);
  // stream 0, the loop and the next stream's first batch: U loads each
  assert.equal(loads(persist), 3 * U);
  assert.equal(loads(prefetch), 3 * U);
  assert.equal(loads(prefetch.split("red.release")[0]), 3 * U);
  assert.equal(loads(persist.split("red.release")[0]), 2 * U);
  for (const s of [persist, prefetch]) assert.doesNotMatch(s, /griddepcontrol/);
});

test("megaPtx: one loader's bulk copies into an mbarrier ring; what a stream waits for, per --dep", () => {
  const count = (s: string, re: RegExp) => (s.match(re) ?? []).length;
  for (const dep of ["all", "one", "none", "ll"] as const) {
    const k = megaPtx(6, 32 << 10, dep);
    assert.equal(count(k, /cp\.async\.bulk\.shared::cluster\.global\.mbarrier::complete_tx::bytes/g), 1, dep);
    assert.equal(count(k, /mbarrier\.init/g), 12, dep); // a full and an empty barrier a buffer
    assert.match(k, /min\.u32 %r53, %r53, 2048;/); // a piece is at most one 32 KiB buffer of 16-byte chunks
    // the counter spin (every block's or the next block's), the polled tagged words, or nothing
    const spin = count(k, /ld\.acquire\.gpu\.global\.u32 %r47/g), poll = count(k, /ld\.relaxed\.gpu\.global\.v2\.u32/g);
    const want: Record<MegaDep, [number, number]> = { all: [1, 0], one: [1, 0], none: [1, 0], ll: [0, 1] };
    assert.deepEqual([spin, poll], want[dep], dep);
    // "none" jumps past its spin (the code stays, unreached); the others reach it
    if (dep !== "ll") assert.equal(/\nbra L_dsync;\n/.test(k.split("@%p3 bra L_nodep;")[1].split("L_spin:")[0]), dep === "none", dep);
    // ll's words carry their tag in the same store, with no release add; the others publish through a counter
    assert.equal(count(k, /red\.release\.gpu/g), dep === "ll" ? 0 : dep === "one" ? 2 : 1, dep);
    assert.equal(count(k, /st\.relaxed\.gpu\.global\.v2\.u32 \[%rd3\], \{%r10, %r36\}/g), dep === "ll" ? 1 : 0, dep);
  }
  assert.match(megaPtx(6, 32 << 10, "one"), /rem\.u32 %r68, %r68, %r3/); // the next block, wrapping
});

const ptxas = findPtxas();
test("megaPtx assembles for sm_90 in every --dep mode", { skip: ptxas ? false : "ptxas not found (set PTXAS or install the CUDA toolkit)" }, () => {
  for (const dep of ["all", "one", "none", "ll"] as const) {
    const r = assemble(ptxas!, megaPtx(12, 16 << 10, dep));
    assert.ok(r.ok, `${dep}: ${r.log}`);
  }
});
