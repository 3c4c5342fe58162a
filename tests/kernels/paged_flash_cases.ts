// Cases of the MMA decode attention (kernels/lib/flash_decode.ts), run on the JS device with the MMA emulated
// (paged_flash.test.ts) and on a real PTX device (tests/ptx/paged_flash.test.ts). Paged: its partials, combined by
// attentionCombine, against a float64 reference over each row's logical positions (through a shuffled block table);
// a row's partials alone and inside a batch, bit for bit; and its faults. Contiguous: attention()'s cases and
// reference (cases.ts) through the partials and the combine.
//
// Tolerance: Q and P enter the MMA as hi + lo 16-bit parts (within 2^-18 of themselves with bf16 K/V, 2^-22 with
// f16), K and V exactly, sums in f32. A score's error is at most ~2^-17 scale sum_d |q k|, which moves the output by
// at most twice that times the weighted |v| (`mag`): rel 2e-4 covers the cases' scores (|q|, |k| <= 2, hd <= 128).
import type { Device, DeviceBuffer } from "../../backends/device.ts";
import { KernelFault } from "../../backends/errors.ts";
import type { Caps } from "../../kernels/target.ts";
import { attentionCombine } from "../../kernels/lib/attention_combine.ts";
import { flashDecodePartial, pagedFlashPartial } from "../../kernels/lib/flash_decode.ts";
import { type AttnCfg, attentionCase, type KernelCase } from "./cases.ts";
import { runPartialCombine } from "./mma_cases.ts";
import { asF32, bytes, floats, Rng } from "./data.ts";

export interface PagedFlashCfg {
  rows: number;
  heads: number;
  kvHeads: number;
  hd: number;
  block: number;
  maxBlocks: number;
  splits: number;
  /** Each row's position (its query sees positions 0..pos). */
  pos: number[];
  kv: "bf16" | "f16";
  window?: number;
  softcap?: number;
  /** Blocks of the pool (default rows * maxBlocks + 3). */
  pool?: number;
  /** Load each trip's successor's K/V ahead (AttentionShape.prefetch). */
  prefetch?: boolean;
  /** K/V through a cp.async pipeline this many trips deep (FlashDecodeShape.stages). */
  stages?: number;
}

export function pagedFlashCfgs(): PagedFlashCfg[] {
  return [
    { rows: 3, heads: 8, kvHeads: 2, hd: 64, block: 16, maxBlocks: 10, splits: 3, pos: [150, 17, 0], kv: "bf16" },
    { rows: 2, heads: 14, kvHeads: 2, hd: 64, block: 8, maxBlocks: 12, splits: 4, pos: [95, 40], kv: "f16" },
    { rows: 2, heads: 8, kvHeads: 1, hd: 128, block: 16, maxBlocks: 8, splits: 2, pos: [127, 3], kv: "bf16" },
    { rows: 2, heads: 2, kvHeads: 2, hd: 64, block: 4, maxBlocks: 16, splits: 5, pos: [63, 30], kv: "bf16", window: 20, softcap: 5 },
  ];
}

export function pagedFlashName(c: PagedFlashCfg): string {
  return `paged flash${c.prefetch ? " prefetch" : ""}${c.stages ? ` ${c.stages} stages` : ""} rows=${c.rows} heads=${c.heads}/${c.kvHeads} hd=${c.hd} block=${c.block}x${c.maxBlocks} splits=${c.splits} pos=${c.pos.join("/")} ${c.kv}` +
    `${c.window ? ` window=${c.window}` : ""}${c.softcap ? ` softcap=${c.softcap}` : ""}`;
}

const poolBlocks = (c: PagedFlashCfg) => c.pool ?? c.rows * c.maxBlocks + 3;

export interface PagedFlashInputs {
  /** q, k, v, table, pos (bytes). */
  ins: Uint8Array[];
  k: Float64Array;
  v: Float64Array;
}

/** Deterministic inputs: every row's table over its own shuffled pool blocks. */
export function pagedFlashInputs(c: PagedFlashCfg): PagedFlashInputs {
  const rng = new Rng(pagedFlashName(c));
  const poolRows = poolBlocks(c) * c.block, kvn = poolRows * c.kvHeads * c.hd;
  const q = rng.f32(c.rows * c.heads * c.hd, -2, 2);
  const K = floats(rng, c.kv, kvn, -2, 2), V = floats(rng, c.kv, kvn);
  const order = Array.from({ length: poolBlocks(c) }, (_, i) => i);
  for (let i = order.length - 1; i > 0; i--) {
    const j = Math.floor(rng.next() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const table = Int32Array.from({ length: c.rows * c.maxBlocks }, (_, i) => order[i]);
  return { ins: [bytes(q), K.bytes, V.bytes, bytes(table), bytes(Int32Array.from(c.pos))], k: K.values, v: V.values };
}

/** The float64 reference of every (row, head): out and sum_p w_p |v_p| (the tolerance's scale). */
export function pagedFlashReference(c: PagedFlashCfg, inp: PagedFlashInputs): { want: Float64Array; mag: Float64Array } {
  const { rows, heads, kvHeads, hd, block, maxBlocks } = c;
  const q = asF32(inp.ins[0]), table = new Int32Array(inp.ins[3].slice().buffer);
  const scale = Math.fround(1 / Math.sqrt(hd));
  const want = new Float64Array(rows * heads * hd), mag = new Float64Array(rows * heads * hd);
  for (let r = 0; r < rows; r++) {
    const pos = c.pos[r], first = c.window ? Math.max(0, pos + 1 - c.window) : 0;
    const phys = (p: number) => table[r * maxBlocks + Math.floor(p / block)] * block + (p % block);
    for (let h = 0; h < heads; h++) {
      const g = Math.floor(h / (heads / kvHeads)), qo = (r * heads + h) * hd;
      const sc: number[] = [];
      for (let p = first; p <= pos; p++) {
        let s = 0;
        for (let d = 0; d < hd; d++) s += q[qo + d] * inp.k[(phys(p) * kvHeads + g) * hd + d];
        sc.push(c.softcap ? c.softcap * Math.tanh((s * scale) / c.softcap) : s * scale);
      }
      const mx = Math.max(...sc), w = sc.map((s) => Math.exp(s - mx)), sum = w.reduce((a, b) => a + b, 0);
      for (let d = 0; d < hd; d++) {
        let o = 0, m = 0;
        w.forEach((wi, i) => {
          const x = inp.v[(phys(first + i) * kvHeads + g) * hd + d];
          o += wi * x;
          m += wi * Math.abs(x);
        });
        want[qo + d] = o / sum;
        mag[qo + d] = m / sum;
      }
    }
  }
  return { want, mag };
}

const shapeOf = (c: PagedFlashCfg) => ({
  rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, poolRows: poolBlocks(c) * c.block, block: c.block, maxBlocks: c.maxBlocks,
  kv: c.kv, pos: "i32" as const, table: "i32" as const, splits: c.splits, window: c.window, softcap: c.softcap, prefetch: c.prefetch, stages: c.stages,
});

/** The partials, and with `combine` the output, of one run over `ins`; or the KernelFault it raised. */
export async function runPagedFlash(dev: Device, caps: Caps, c: PagedFlashCfg, ins: Uint8Array[], combine: boolean): Promise<{ part: Uint8Array; out?: Uint8Array } | KernelFault> {
  const k = pagedFlashPartial(caps, shapeOf(c));
  const ck = attentionCombine(caps, { rows: c.rows, heads: c.heads, hd: c.hd, splits: c.splits });
  const partBytes = c.rows * c.heads * c.splits * (c.hd + 2) * 4, outBytes = c.rows * c.heads * c.hd * 4;
  const nan = (n: number) => bytes(new Float32Array(n / 4).fill(NaN));
  const bufs: DeviceBuffer[] = [...ins, nan(partBytes), nan(outBytes)].map((b) => {
    const x = dev.alloc(b.byteLength, "device");
    dev.write(x, 0, b);
    return x;
  });
  const bind = (b: DeviceBuffer) => ({ buffer: b, offset: 0, bytes: b.bytes });
  try {
    dev.run([
      { k: "kernel", compiled: dev.compile(k), grid: k.grid, work: { bytes: 0, flops: 0 }, bindings: bufs.slice(0, 6).map(bind) },
      ...(combine ? [{ k: "kernel" as const, compiled: dev.compile(ck), grid: ck.grid, work: { bytes: 0, flops: 0 }, bindings: [bind(bufs[5]), bind(bufs[6])] }] : []),
    ]);
    try {
      await dev.synchronize(60_000);
    } catch (e) {
      if (e instanceof KernelFault) return e;
      throw e;
    }
    const part = await dev.read(bufs[5], 0, partBytes);
    return { part: part.slice(), out: combine ? (await dev.read(bufs[6], 0, outBytes)).slice() : undefined };
  } finally {
    for (const b of bufs) dev.free(b);
  }
}

/** The mismatches of a combined run against the reference (empty = pass). */
export async function checkPagedFlash(dev: Device, caps: Caps, c: PagedFlashCfg, rel = 2e-4): Promise<string[]> {
  const inp = pagedFlashInputs(c);
  const r = await runPagedFlash(dev, caps, c, inp.ins, true);
  if (r instanceof KernelFault) return [`unexpected ${r.message}`];
  const got = asF32(r.out!), { want, mag } = pagedFlashReference(c, inp);
  const bad: string[] = [];
  let count = 0;
  for (let i = 0; i < want.length; i++) {
    if (Number.isFinite(got[i]) && Math.abs(got[i] - want[i]) <= 1e-6 + rel * mag[i]) continue;
    if (++count <= 8) bad.push(`out[${i}]: got ${got[i]}, want ${want[i]} (tol 1e-6 + ${rel} * ${mag[i]})`);
  }
  if (count > 8) bad.push(`... ${count} mismatches in all`);
  return bad;
}

/**
 * Batch invariance: each row's partials computed in a one-row batch (its q, table entries and position alone) equal
 * its partials inside the whole batch, bit for bit. The mismatching rows (empty = pass).
 */
export async function checkPagedFlashInvariance(dev: Device, caps: Caps, c: PagedFlashCfg): Promise<string[]> {
  const inp = pagedFlashInputs(c);
  const all = await runPagedFlash(dev, caps, c, inp.ins, false);
  if (all instanceof KernelFault) return [`unexpected ${all.message}`];
  const per = c.heads * c.splits * (c.hd + 2) * 4, bad: string[] = [];
  for (let r = 0; r < c.rows; r++) {
    const one = { ...c, rows: 1, pos: [c.pos[r]], pool: poolBlocks(c) };
    const q = inp.ins[0].slice(r * c.heads * c.hd * 4, (r + 1) * c.heads * c.hd * 4);
    const table = inp.ins[3].slice(r * c.maxBlocks * 4, (r + 1) * c.maxBlocks * 4);
    const alone = await runPagedFlash(dev, caps, one, [q, inp.ins[1], inp.ins[2], table, bytes(Int32Array.of(c.pos[r]))], false);
    if (alone instanceof KernelFault) {
      bad.push(`row ${r} alone: ${alone.message}`);
      continue;
    }
    const want = all.part.slice(r * per, (r + 1) * per);
    if (!want.every((x, i) => x === alone.part[i])) bad.push(`row ${r}: partials alone differ from inside the batch`);
  }
  return bad;
}

// ---- over a contiguous cache (flashDecodePartial) -----------------------------------------------------

/** Decode-sized attention() cases (bf16/f16 K/V) for the contiguous MMA kernel. */
export function decodeFlashCfgs(): AttnCfg[] {
  return [
    { rows: 1, heads: 8, kvHeads: 2, hd: 64, cap: 200, pos: 150, kv: "bf16" },
    { rows: 1, heads: 14, kvHeads: 2, hd: 64, cap: 100, pos: 99, kv: "f16", pt: "i32" },
    { rows: 3, heads: 4, kvHeads: 1, hd: 128, cap: 64, pos: 20, kv: "bf16" },
    { rows: 1, heads: 2, kvHeads: 2, hd: 64, cap: 80, pos: 70, kv: "bf16", window: 16, softcap: 10 },
  ];
}

/**
 * flashDecodePartial with `splits` then attentionCombine over attentionCase's inputs: the case's problems (empty =
 * pass), at this file's tolerance (rel 2e-4 of the weighted |v|); with `fault`, the fault case's.
 */
export function runDecodeFlash(
  dev: Device, caps: Caps, c: AttnCfg, splits: number, fault = false, o: { prefetch?: boolean; stages?: number } = {},
): Promise<string[]> {
  const base = attentionCase(c, fault);
  const kc: KernelCase = { ...base, expect: (ins) => base.expect(ins).map((e) => ({ ...e, tol: { abs: 1e-6, rel: 2e-4 } })) };
  const ins = kc.inputs();
  const fk = flashDecodePartial(caps, { rows: c.rows, heads: c.heads, kvHeads: c.kvHeads, hd: c.hd, cap: c.cap, kv: c.kv, pos: c.pt, window: c.window, softcap: c.softcap, splits, ...o });
  const ck = attentionCombine(caps, { rows: c.rows, heads: c.heads, hd: c.hd, splits });
  return runPartialCombine(dev, kc, ins, fk, ck, c.rows * c.heads * splits * (c.hd + 2) * 4);
}
