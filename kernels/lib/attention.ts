// Attention over a fixed-capacity KV cache, for decode (rows = 1) and prefill (rows query rows at positions
// pos .. pos+rows-1, causal). The graph defines it over all `cap` positions with a mask (position <= the
// query's position); the kernel reads `pos` from the slot buffer and stops its loop at pos+row+1, so work
// tracks the real context while the grid is constant. Masked terms would contribute exp(-inf) = 0 exactly,
// so this equals the masked full sweep up to float reassociation.
// One team per (query row, head); lanes own contiguous slices of head_dim (vector loads), reduce the dot
// product per position, and keep an online softmax (running max, sum and weighted V) in registers. Split-K
// partials are combined by attention_combine.ts (its own kernel, or this kernel's tail in attentionFused).
import { type Buffer, f32, type Kernel, KernelBuilder, KernelError, u32, type Val } from "../ir.ts";
import { kvTrips, rowLoader } from "./attention_rows.ts";
import { fuseCombine } from "./attention_combine.ts";
import type { Caps } from "../target.ts";
import { FAULT } from "./codes.ts";
import { asIndex, type FType, gridFor, type IType, pairwise, type Team, team, teamRow, teamReduce, vecWidth } from "./common.ts";
import { QLAYOUT, type QType, XQ_TYPES } from "./dequant.ts";
import { runsPerItem, xqLayout } from "./xq_layout.ts";

export interface AttentionShape {
  /** Query rows (1 = decode). */
  rows?: number;
  heads: number;
  kvHeads: number;
  /** head_dim */
  hd: number;
  /** KV capacity (positions). */
  cap: number;
  /** Storage type of K and V (default f32). */
  kv?: FType;
  /** Type of the position slot (default u32). */
  pos?: IType;
  /** Score scale, default 1/sqrt(hd). */
  scale?: number;
  /** Sliding window: row r sees only positions pos + r - window < p <= pos + r. */
  window?: number;
  /** Scores become softcap · tanh(score / softcap) after the scale (Gemma 2). */
  softcap?: number;
  /** Positions per position group per loop trip on subgroup targets (default 8, paged 2): K/V loads in flight per lane. */
  unroll?: number;
  /**
   * (Subgroup teams) each trip issues the next trip's K and V loads before its own arithmetic, held in registers
   * across the trip, so a trip waits on the arithmetic or the loads, not on both in turn. The same rows feed the
   * same operations: the results are bit-identical. Default false (measured slower: kernels/lib/attention_rows.ts).
   */
  prefetch?: boolean;
  /**
   * Split-K: cut the live positions into as many chunks as hold a whole loop trip each, at most `splits` (default
   * true); false cuts them into `splits` chunks whatever their length (the layout before session 8, for benches).
   * H200, whole decode step on ptx (bench/kernels.ts --wall, ptx against ptx:no-attention-live): 1B 0.865 against
   * 0.878 ms and qwen2.5-0.5b 0.621 against 0.629 at pos 64; the same within noise at pos 1900 and on Vulkan.
   */
  live?: boolean;
  /**
   * Split-K, not paged: a row with at most two slots of positions for each of a workgroup's teams spreads them over
   * those teams, and a team's last trip runs only the slots it has positions for (chunking below). Default true.
   * H100, session 36 (README; bench/kernels.ts --wall, the PTX short entry, tail bodies in the loop as first built):
   * qwen2.5-0.5b 0.598 -> 0.581 ms a token at pos 16, the 1B 1.021 -> 1.010; on Vulkan the 1B 1.136 -> 1.115.
   */
  spread?: boolean;
  /**
   * Paged split-K: a chunk's block-table entries held in lanes, taken by shuffle (default true where they fit).
   * H200, session 8 (bench/serve_kernels.ts, pos 576): the 8B's paged attention 53.9 µs a layer at 32 rows and
   * 9.7 at one (60.2 and 11.4 with a table load per position, measured in an earlier call); the whole 32-row entry
   * 10.16 against 10.29 ms (tune tload, the same call). Positions per trip (unroll 4 or 8) gained nothing with it.
   */
  tableInLanes?: boolean;
  /**
   * Query heads per team, a divisor of heads / kvHeads (default 1): a team computes that many heads of one KV head
   * from each K and V row it loads, where one team per head would load the row once per head (through L2). Each
   * head's operations and their order are the same at any value: the results are bit-identical (a choice that
   * followed the row count would keep a row's result batch-invariant). Not with the fused combine (attentionFused
   * keeps one head per team). kernels/lower/attention.ts attentionGroup says why the default stays one.
   */
  group?: number;
  name?: string;
}

/** A KV pool read through per-row block tables (see pagedAttention). */
export interface PagedAttentionShape extends Omit<AttentionShape, "cap"> {
  /** Rows of the K/V pool (numBlocks * block). */
  poolRows: number;
  /** Positions per block. */
  block: number;
  /** Entries of each row's block table. */
  maxBlocks: number;
  /** Type of the block table (default i32). */
  table?: IType;
}

/**
 * out[r, h, :] = softmax_p(scale * q[r, h, :] . K[p, h / (heads / kvHeads), :] masked to p <= pos + r) @ V.
 * Bindings, in order: q f32 [rows, heads, hd] (r); k [cap, kvHeads, hd] (r); v [cap, kvHeads, hd] (r);
 * pos [1] u32|i32 (r, the slot: position of query row 0); out f32 [rows, heads, hd] (w).
 * Faults FAULT.ATTENTION_POS when pos + rows > cap (or pos < 0).
 */
export function attention(caps: Caps, s: AttentionShape): Kernel {
  return attentionKernel(caps, s, 0);
}

/**
 * out[r, h, :] = softmax_t(scale * q[r, h, :] . K[phys(r, t), kvh, :]) @ V over t = 0..pos[r], where
 * phys(r, t) = table[r, t / block] * block + t % block. Each row carries its own position and block table, so one
 * step serves decode rows of many sequences and prefill rows of one (same table, consecutive positions). A row's
 * loop, lanes and reduction order do not depend on the other rows: its result is the same in any batch.
 * Bindings, in order: q f32 [rows, heads, hd] (r); k [poolRows, kvHeads, hd] (r); v likewise (r);
 * table [rows, maxBlocks] (r); pos [rows] (r); out f32 [rows, heads, hd] (w).
 * Faults FAULT.ATTENTION_POS when pos[r] >= maxBlocks * block (or negative), FAULT.PAGED_BLOCK when a table entry
 * it reads is >= poolRows / block (or negative).
 */
export function pagedAttention(caps: Caps, s: PagedAttentionShape): Kernel {
  if (s.poolRows % s.block !== 0) throw new KernelError(`paged attention: block ${s.block} does not divide ${s.poolRows} rows`);
  return attentionKernel(caps, { ...s, cap: s.poolRows }, 0, s);
}

/**
 * Split-K phase 1 of pagedAttention: like attentionPartial, each row's positions 0..pos[r] in `splits` chunks
 * (bindings q, k, v, table, pos, part). With a split count fixed by the table length (never by the row count),
 * a row's reduction order still does not depend on the batch. Combine with attentionCombine.
 */
export function pagedAttentionPartial(caps: Caps, s: PagedAttentionShape & { splits: number }): Kernel {
  if (s.poolRows % s.block !== 0) throw new KernelError(`paged attention: block ${s.block} does not divide ${s.poolRows} rows`);
  if (!(s.splits >= 1 && s.splits <= s.maxBlocks * s.block)) throw new KernelError(`paged attention: ${s.splits} splits of ${s.maxBlocks * s.block} positions`);
  return attentionKernel(caps, { ...s, cap: s.poolRows }, s.splits, s);
}

/**
 * Split-K (flash-decoding) phase 1: the positions a query row sees (0 .. pos + r) split into `splits` chunks
 * of ceil((pos + r + 1) / splits), sized from the slot's position so every team has a share at any context
 * length; each (row, head, chunk) team writes its chunk's unnormalized partial: [m, l, acc[hd]] (running max,
 * sum of exp(s - m), sum of exp(s - m) * v). An empty chunk writes m = -inf, l = 0, acc = 0. Combine with
 * attentionCombine.
 * Bindings: q, k, v, pos as attention(); part f32 [rows * heads, splits, hd + 2] (w).
 */
export function attentionPartial(caps: Caps, s: AttentionShape & { splits: number }): Kernel {
  if (!(s.splits >= 1 && s.splits <= s.cap)) throw new KernelError(`attention: ${s.splits} splits of cap ${s.cap}`);
  return attentionKernel(caps, s, s.splits);
}

/**
 * attentionPartial and attentionCombine in one dispatch, for targets where a dispatch costs more than the
 * combine's work (Vulkan, WebGPU: each dispatch after a barrier pays a launch and a drain). Every team writes
 * its partial as attentionPartial does; after a device barrier each of its lanes adds 1 to its item's counter;
 * the team whose lane takes the count to splits * lanes is the item's last, and after a second device barrier
 * (acquire) it combines the item's partials exactly as attentionCombine does (the same operations in the same
 * order: the output is bit-identical to the two-kernel path) and zeroes the counter for the next dispatch.
 * Bindings: q, k, v, pos as attention(); part f32 [rows * heads, splits, hd + 2] then u32 counters
 * [rows * heads], all zero before the first dispatch (rw: a State buffer, zeroed again by a state reset);
 * out f32 [rows, heads, hd] (w). Needs subgroup teams and a grid of whole teams (attentionFusable).
 */
export function attentionFused(caps: Caps, s: AttentionShape & { splits: number; count?: FusedCount; skipEmpty?: boolean; local?: boolean; wg?: number; prep?: FusedPrep }): Kernel {
  if (!(s.splits >= 1 && s.splits <= s.cap)) throw new KernelError(`attention: ${s.splits} splits of cap ${s.cap}`);
  const why = s.prep ? attentionPreps(caps, s) : attentionFusable(caps, s);
  if (why) throw new KernelError(`attention: no fused combine: ${why}`);
  return attentionKernel(caps, s, s.splits, undefined, { count: s.count ?? "lane", skipEmpty: s.skipEmpty ?? false, local: s.local ?? true, wg: s.wg, prep: s.prep });
}
/**
 * attentionFused's output as the o projection's prepared x (CompileOptions.attentionPrep): the combining team
 * quantizes the item's values into kernels/lib/xq_layout.ts's runs for weight type `w` (k = heads · hd) instead of
 * storing them as f32, so the o projection needs no prep dispatch. The bits of attentionFused then xqPrep. The out
 * binding is then the prep's u32 words [xqLayout(w, k, false).total].
 */
export interface FusedPrep {
  w: QType;
  k: number;
}
/** Why attentionFused cannot write the prepared x of `prep` for the shape on these caps, or "" (it can). */
export function attentionPreps(caps: Caps, s: { rows?: number; heads: number; hd: number; splits: number; wg?: number; prep?: FusedPrep }): string {
  const why = attentionFusable(caps, s);
  if (why || !s.prep) return why || "no prep";
  const { w, k } = s.prep;
  if ((s.rows ?? 1) !== 1 || k !== s.heads * s.hd) return `x of ${s.rows ?? 1} rows x ${s.heads * s.hd} is not one row of k ${k}`;
  if (!XQ_TYPES.includes(w) || k % QLAYOUT[w].elems) return `k ${k} is not whole ${w} blocks`;
  if (!runsPerItem(w, s.hd)) return `${w}'s runs straddle heads of ${s.hd}`;
  if (caps.subgroupSize % xqLayout(w, k, false).words) return `a ${w} run's words do not fit subgroups of ${caps.subgroupSize}`;
  return "";
}
/**
 * Who counts a finished team in attentionFused: "lane" (default), every lane of it (splits * lanes atomics on
 * an item's counter); "team", its lane 0 alone after the device barrier (splits atomics: 1/lanes of the
 * contention). "team" leans on barrier("device") making the whole workgroup's writes available at device scope
 * before lane 0's count, which SPIR-V's OpControlBarrier with Device memory scope does (and the JS device) but
 * WGSL's storageBarrier, workgroup-scoped, does not: never for WGSL.
 */
export type FusedCount = "lane" | "team";
/**
 * attentionFused's variants: who counts (FusedCount), and skipEmpty: a team whose chunk is empty (positions
 * past pos: 31 of 32 chunks at position 0) neither writes its partial nor counts, and the combine takes the
 * empty chunks' (m, l, acc) as (-inf, 0, 0), the values their partials would hold, without reading them: the
 * same operations on the same values, so still bit-identical to partial + combine.
 * local (default on where a workgroup holds several teams of an item): while an item's chunks with positions all
 * fall in its first workgroup (a short context: at most that many trips), that workgroup's teams leave their
 * partials in shared memory, neither write nor count them, and after a workgroup barrier (not the counting path's
 * two device barriers) the workgroup combines them itself, the chunks past it taken as (-inf, 0, 0); the item's other
 * workgroups do nothing. The same operations on
 * the same values again (bit-identical), without the partials' trip through memory, the counting and the
 * last team's reads. Past that, every team takes the path above.
 */
interface Fused {
  count: FusedCount;
  prep?: FusedPrep;
  skipEmpty: boolean;
  local: boolean;
  /** Invocations a workgroup (team()'s default where undefined): its teams, so how deep the local combine reaches. */
  wg?: number;
}
/** Why attentionFused cannot serve the shape on these caps, or "" (it can). */
export function attentionFusable(caps: Caps, s: { rows?: number; heads: number; splits: number; wg?: number }): string {
  const teams = (s.rows ?? 1) * s.heads * s.splits, t = team(caps, { rows: teams, wg: s.wg });
  if (t.lanes <= 1 || t.shared || t.sgs !== 1) return "teams are not subgroups";
  if (teams % t.rows !== 0) return `${teams} teams do not fill workgroups of ${t.rows}`;
  return "";
}
/** Bytes of attentionFused's part binding: the partials, then a u32 counter per item. */
export function attentionFusedBytes(s: { rows?: number; heads: number; hd: number; splits: number }): number {
  const items = (s.rows ?? 1) * s.heads;
  return (items * s.splits * (s.hd + 2) + items) * 4;
}

/**
 * A split count for the paged (serving) attention on this target, from the table's length alone (a row's order
 * must not depend on the batch): chunks of about 64 positions on wide targets, at most 64, none on one-lane
 * ones. A team walks its chunk 8 positions a trip, one memory round trip each: at 256-position chunks the H200
 * spent 34 µs a layer at batch 1 (32 heads x 3 chunks of a 592-position table: 96 teams) and 81 µs at batch 32
 * (bench/serve_kernels.ts, 8B).
 */
export function attentionSplits(caps: Caps, cap: number): number {
  if (!caps.subgroups || caps.subgroupSize <= 1) return 1;
  return Math.max(1, Math.min(64, Math.ceil(cap / 64)));
}

/**
 * A team's position groups (G groups of lpp lanes, each taking every G-th position) and positions per group per
 * loop trip (U): the kernel's trip covers G * U positions. Each trip's K and V loads are all issued before the
 * first score is used, so a lane has 2U 16-byte loads in flight where one position per trip waited on each load
 * in turn; one max, one rescale and one sum per trip for the U scores. Paged rows default to U = 2 (the H200's
 * serving entries measured 4 and 8 no faster: bench/serve_kernels.ts --tune u4,u8, session 8).
 */
function positionGroups(t: Team, hd: number, kv: FType, unroll: number | undefined, paged: boolean): { lpp: number; G: number; U: number } {
  const kvVec = kv === "f32" ? 4 : 8;
  let lpp = t.lanes;
  if (t.lanes > 1 && !t.shared && t.sgs === 1) {
    lpp = 1;
    while (lpp * 2 <= t.lanes && hd % (lpp * 2) === 0 && hd / (lpp * 2) >= kvVec) lpp *= 2;
    if (hd % lpp !== 0) lpp = t.lanes;
  }
  const U = t.lanes > 1 ? Math.max(1, unroll ?? (paged ? 2 : 8)) : 1;
  return { lpp, G: t.lanes / lpp, U };
}

/**
 * How a split-K team of attentionPartial / attentionFused on these caps cuts a row's live positions (liveChunks):
 * `trip` positions a loop trip, `step` positions a trip's slot (its position groups), `spread` the teams a short
 * row spreads over (1: none) and `tail` the most slots a team then takes (its largest tail trip).
 */
export interface Chunking {
  trip: number;
  step: number;
  spread: number;
  tail: number;
}

/** The chunking of attentionPartial / attentionFused (split-K, not paged) on these caps. */
export function attentionChunking(caps: Caps, s: AttentionShape & { splits: number }): Chunking {
  const teams = ((s.rows ?? 1) * s.heads / (s.group ?? 1)) * Math.max(1, s.splits);
  return chunking(team(caps, { rows: teams }), caps, s, false);
}

/**
 * Spreading: a row with at most `tail` slots (`step` positions each) for each of a workgroup's `spread` teams
 * takes a slot on each of as many of them as it fills, then a second, rather than whole trips on a few (the
 * workgroup's combine takes them all the same), and a team's last trip runs only the slots it has positions for
 * (the loop's tail trips, tailTiers). So a short row's time is a slot or two of loads and arithmetic, not a trip's.
 * Longer rows are cut in whole trips as before: spread to 8 teams of 4 slots, the 8B at 48 positions measured
 * slower than 4 teams of 8 (README, session 36). Not paged (serving's rows fill the GPU already), not `live: false`,
 * not with `prefetch` (its carried rows are a whole trip's).
 */
function chunking(t: Team, caps: Caps, s: AttentionShape, paged: boolean): Chunking {
  if (s.live === false) return { trip: 1, step: 1, spread: 1, tail: 1 };
  const { G, U } = positionGroups(t, s.hd, s.kv ?? "f32", s.unroll, paged);
  // a default workgroup's teams, whatever the count of rows, heads or heads a team: a row's chunks depend on it alone
  const spread = paged || U === 1 || s.spread === false || s.prefetch ? 1 : team(caps).rows;
  return { trip: G * U, step: G, spread, tail: tailTiers(U)[1] ?? 1 };
}

/**
 * Chunks holding positions of a row of len positions over S splits: as many as hold a whole trip each, or, spread
 * (at most spread x tail slots of positions), a slot each on up to `spread` teams; at most S (chunkOf's count).
 */
export function liveChunks(len: number, S: number, c: Chunking): number {
  if (S <= 1) return 1;
  const spread = c.spread > 1 && len <= c.spread * c.tail * c.step ? Math.min(c.spread, Math.ceil(len / c.step)) : 1;
  return Math.min(S, Math.max(1, Math.ceil(len / c.trip), spread));
}

/**
 * The most positions a row of attentionFused (default variant, one row) may see while its chunks with positions all
 * fall in the item's first workgroup (Fused.local: combined there, no partials through memory, nothing counted): the
 * kernel's own chunking (liveChunks) for every count of positions from 1 up; 0 where the
 * local combine does not apply.
 */
export function attentionLocalReach(caps: Caps, s: AttentionShape & { splits: number; wg?: number }): number {
  const S = Math.max(1, s.splits), heads = s.heads;
  const t = team(caps, { rows: heads * S, wg: s.wg });
  const W = t.rows;
  if (attentionFusable(caps, { heads, splits: S, wg: s.wg }) || !localFits(W, S)) return 0;
  const c = chunking(t, caps, s, false);
  let len = 0;
  for (; len < s.cap; len++) {
    const n = len + 1, share = Math.ceil(n / liveChunks(n, S, c));
    if (Math.ceil(n / share) > W) break;
  }
  return len;
}

/** Whether W teams a workgroup can combine an item's S chunks locally (Fused.local): whole items, or W of an item's chunks at a time. */
function localFits(W: number, S: number): boolean {
  return W > 1 && (W % S === 0 || (S % W === 0 && W <= 32 && (W & (W - 1)) === 0));
}

/** An attention kernel's name: its shape, and what it is (fused, partial, paged or whole). */
function kernelName(s: AttentionShape, o: { splits: number; S: number; gq: number; paged?: PagedAttentionShape; fusedAs?: Fused; localOk: boolean; prefetch: boolean }): string {
  const rows = s.rows ?? 1, { heads, kvHeads, hd, cap } = s, kv = s.kv ?? "f32", pt = s.pos ?? "u32";
  const { splits, S, gq, paged, fusedAs: f } = o;
  const tt = paged?.table ?? "i32";
  const base = `r${rows}_h${heads}_kv${kvHeads}_d${hd}_c${cap}_${kv}_${pt}${s.window ? `_w${s.window}` : ""}${s.softcap ? `_cap${String(s.softcap).replace(/\W/g, "_")}` : ""}` +
    (paged ? `_b${paged.block}_m${paged.maxBlocks}_${tt}` : "") + (s.unroll && s.unroll !== (paged ? 2 : 8) ? `_u${s.unroll}` : "") +
    (splits && s.live === false ? "_even" : "") + (splits && s.spread === false ? "_ns" : "") + (gq > 1 ? `_g${gq}` : "") + (o.prefetch ? "_pf" : "");
  if (f) return `attention_fused_${base}_s${S}${f.count === "team" ? "_tc" : ""}${f.skipEmpty ? "_se" : ""}${o.localOk ? "_wl" : ""}${f.wg ? `_wg${f.wg}` : ""}${f.prep ? `_xq${f.prep.w}` : ""}`;
  return splits ? `attention_partial_${base}_s${S}` : paged ? `paged_attention_${base}` : `attention_${base}`;
}

/**
 * One trip of positions for one head (online softmax): its scores against the trip's K rows (out-of-range ones
 * -inf), the running max moved to the trip's, the sum l and the weighted V acc rescaled and added to.
 */
function onlineTrip(
  b: KernelBuilder,
  h: { qs: Val[]; m: Val; l: Val; acc: Val[] },
  trip: { subs: { inRange?: Val }[]; ks: Val[][]; vs: Val[][] },
  o: { scale: number; softcap?: number; nd: number; groupSum: (v: Val) => Val },
): void {
  const { qs, m, l, acc } = h, { subs, ks, vs } = trip, { scale, softcap, nd, groupSum } = o;
  const scs = subs.map((x, j) => {
    const part = pairwise(qs.map((qj, e) => qj.mul(ks[j][e]))); // a tree: short dependency chains
    let sc = b.let(groupSum(b.let(part, "f32", "part")).mul(scale), "f32", "s");
    if (softcap) sc = b.let(sc.div(softcap).tanh().mul(softcap), "f32", "s");
    return x.inRange ? b.let(x.inRange.select(sc, f32(-Infinity)), "f32", "s") : sc;
  });
  let top = [m, ...scs];
  while (top.length > 1) {
    const next: Val[] = [];
    for (let i = 0; i < top.length; i += 2) next.push(i + 1 < top.length ? top[i].max(top[i + 1]) : top[i]);
    top = next;
  }
  const mn = b.let(top[0], "f32", "mn");
  // exp(0) = 1 exactly: skipping it when the max holds changes nothing (and saves a CPU target an exp)
  const corr = b.let(m.eq(mn).select(f32(1), m.sub(mn).exp()), "f32", "corr");
  const pes = scs.map((sc, j) => {
    const r = subs[j].inRange;
    return b.let(r ? r.select(sc.sub(mn).exp(), f32(0)) : sc.sub(mn).exp(), "f32", "pe");
  });
  b.set(l, l.mul(corr).add(pairwise(pes)));
  for (let e = 0; e < nd; e++) b.set(acc[e], acc[e].mul(corr).add(pairwise(pes.map((pe, j) => pe.mul(vs[j][e])))));
  b.set(m, mn);
}

/**
 * A team's work item: (row, head) or, with gq > 1, (row, kv head, group of gq heads), and its heads' items; its
 * split-K chunk; the positions its row sees (end: one past its own; first: a sliding window's start) and, paged,
 * its row of the block table.
 */
function workItem(b: KernelBuilder, o: {
  trow: Val; splits: number; S: number; gq: number; heads: number; group: number; paged?: PagedAttentionShape; P: Buffer; pos: Val; window?: number;
}): { chunkIdx?: Val; kvh: Val; itemsOf: Val[]; end: Val; tbase?: Val; first?: Val } {
  const { trow, splits, S, gq, heads, group, paged } = o;
  const witem = splits ? b.let(trow.div(S), "u32", "item") : trow;
  const chunkIdx = splits ? b.let(trow.mod(S), "u32", "ci") : undefined;
  const hfirst = gq === 1 ? witem.mod(heads) : b.let(witem.mod(heads / gq).mul(gq), "u32", "h0");
  const kvh = b.let(group === 1 ? hfirst : hfirst.div(group), "u32", "kvh");
  const r = gq === 1 ? witem.div(heads) : b.let(witem.div(heads / gq), "u32", "r");
  const itemsOf = Array.from({ length: gq }, (_, j) => gq === 1 ? witem : b.let(r.mul(heads).add(hfirst).add(j), "u32", "it"));
  let end: Val;
  if (paged) {
    // This row's own position: the loop (and so the reduction order) depends on nothing else in the step.
    const pos = b.let(asIndex(b.load(o.P, r)), "u32", "pos");
    b.check(pos.lt(paged.maxBlocks * paged.block), FAULT.ATTENTION_POS);
    end = b.let(pos.add(1), "u32", "end");
  } else end = b.let(o.pos.add(r).add(1), "u32", "end");
  const tbase = paged ? b.let(r.mul(paged.maxBlocks), "u32", "tb") : undefined;
  // A sliding window starts the sweep at end - window (the positions before it are masked out).
  const w = o.window;
  const first = w ? b.let(end.max(w).sub(w), "u32", "first") : undefined;
  return { chunkIdx, kvh, itemsOf, end, tbase, first };
}

function attentionKernel(caps: Caps, s: AttentionShape, splits: number, paged?: PagedAttentionShape, fusedAs?: Fused): Kernel {
  const fused = fusedAs !== undefined;
  const rows = s.rows ?? 1, { heads, kvHeads, hd, cap } = s;
  const kv = s.kv ?? "f32", pt = s.pos ?? "u32";
  if (heads % kvHeads !== 0) throw new KernelError(`attention: ${heads} heads over ${kvHeads} kv heads`);
  if (!paged && rows > cap) throw new KernelError(`attention: ${rows} rows exceed cap ${cap}`);
  if (paged && paged.maxBlocks * paged.block * rows >= 2 ** 32) throw new KernelError("paged attention: table indices exceed 32 bits");
  if (cap * kvHeads * hd >= 2 ** 32) throw new KernelError("attention: KV indices exceed 32 bits");
  const group = heads / kvHeads;
  const gq = fused ? 1 : s.group ?? 1;
  if (!(Number.isInteger(gq) && gq >= 1 && group % gq === 0)) throw new KernelError(`attention: ${gq} heads per team do not divide ${group} heads per KV head`);
  const scale = s.scale ?? 1 / Math.sqrt(hd);
  const items = rows * heads;
  const S = Math.max(1, splits);
  const teams = (items / gq) * S;
  const t = team(caps, { rows: teams, wg: fusedAs?.wg });
  const grid = gridFor(caps, Math.ceil(teams / t.rows));
  const tt = paged?.table ?? "i32";
  // Fused.local: W teams a workgroup, holding one item's chunks W at a time or whole items
  // (where an item spans workgroups, W is the combine's real splits: a power of two up to 32, CombineSource.real)
  const W = t.rows, localOk = !!fusedAs?.local && localFits(W, S);
  const name = s.name ?? kernelName(s, { splits, S, gq, paged, fusedAs, localOk, prefetch: !!s.prefetch && t.lanes > 1 });
  const b = new KernelBuilder(name, { workgroup: t.size, grid });
  const q = b.buffer("q", "f32", "r");
  const K = b.buffer("k", kv, "r");
  const V = b.buffer("v", kv, "r");
  const TB = paged ? b.buffer("table", tt, "r") : undefined;
  const P = b.buffer("pos", pt, "r");
  const out = b.buffer(splits ? "part" : "out", "f32", fused ? "rw" : "w");
  const final = fused ? (fusedAs.prep ? b.buffer("xq", "u32", "w") : b.buffer("out", "f32", "w")) : undefined;

  const { lane, row: trow } = teamRow(b, t, grid);
  let pos: Val = u32(0); // row 0's position (paged: each row's own, in workItem)
  if (!paged) {
    pos = b.let(asIndex(b.load(P, 0)), "u32", "pos");
    b.check(pos.le(cap - rows), FAULT.ATTENTION_POS);
  }
  // (never in a fused kernel: attentionFusable wants whole workgroups of teams, as its barriers do)
  if (grid[0] * grid[1] * grid[2] * t.rows > teams) b.if(trow.ge(teams), () => b.return());

  const { chunkIdx, kvh, itemsOf, end, tbase, first } = workItem(b, { trow, splits, S, gq, heads, group, paged, P, pos, window: s.window });
  const item = itemsOf[0];

  // Position groups: on a subgroup team, lanes split into G groups of lpp lanes; each group takes every G-th
  // position of the chunk (one 16-byte K/V slice per lane where hd allows), keeps its own running max, sum and
  // weighted V, and the groups merge at the end. G positions per step instead of one: the loop is latency-
  // bound (a K load, a reduction, an exp per step). G = 1 is one position per step over the whole team.
  const { lpp, G, U } = positionGroups(t, hd, kv, s.unroll, !!paged);
  // Each lane owns dims [li*nd, li*nd + nd) of the head (dims past hd only when hd % lanes != 0).
  const nd = Math.ceil(hd / lpp);
  const exact = hd % lpp === 0;
  const vq = exact ? vecWidth(4, nd) : 1, vk = exact ? vecWidth(kv === "f32" ? 4 : 2, nd) : 1;
  const gi = G > 1 ? b.let(lane.div(lpp), "u32", "gi") : u32(0);
  const li = G > 1 ? lane.mod(lpp) : lane;
  const d0 = t.lanes === 1 ? u32(0) : b.let(li.mul(nd), "u32", "d0");
  const valid = (j: number): Val | true => exact ? true : d0.add(j).lt(hd);
  const loadRow = rowLoader(b, { nd, d0, hd, exact });
  // Per head of the team: its q slice, running max m, sum l and weighted V acc (gq heads share every K/V load).
  const hs = itemsOf.map((it) => {
    const qbase = b.let(it.mul(hd), "u32", "qb");
    const qs = loadRow(q, qbase, vq).map((v) => b.let(v, "f32", "q"));
    return { it, qbase, qs, m: b.let(f32(-Infinity), "f32", "m"), l: b.let(f32(0), "f32", "l"), acc: qs.map(() => b.let(f32(0), "f32", "acc")) };
  });
  /** Sum over the lanes of one position group (xor shuffles stay inside aligned groups of lpp lanes). */
  const groupSum = (v: Val): Val => {
    if (G === 1) return teamReduce(b, t, "add", v);
    let x = v;
    for (let off = lpp / 2; off >= 1; off /= 2) x = b.let(x.add(b.shuffle("xor", x, off)), "f32", "gs");
    return x;
  };
  const cut = chunking(t, caps, s, !!paged);
  const { start, stop, share, len } = splits && chunkIdx
    ? chunkOf(b, { first, end, chunkIdx, S, ...cut })
    : { start: first ?? u32(0), stop: end, share: undefined, len: undefined };
  // Paged split-K on a subgroup team whose chunk spans at most `lanes` blocks (a chunk holds at most max(trip,
  // ceil(table / splits)) positions) holds the chunk's table entries in lanes.
  const inLanes = !!splits && t.lanes > 1 && !t.shared && t.sgs === 1 && s.tableInLanes !== false && !!paged &&
    Math.ceil(Math.max(G * U, Math.ceil((paged.maxBlocks * paged.block) / S)) / paged.block) + 1 <= t.lanes;
  const physRow = paged && TB && tbase
    ? pagedRows(b, { TB, tbase, block: paged.block, maxBlocks: paged.maxBlocks, poolBlocks: cap / paged.block, lane: inLanes ? lane : undefined, start, stop })
    : (p: Val) => p;
  const tripAt = kvTrips(b, {
    K, V, kv, load: loadRow, physRow, kvHeads, kvh, hd, G, U, gi, nd, d0, vk, exact, start, stop, prefetch: !!s.prefetch && t.lanes > 1,
  });
  const body = (p0: Val, slots: number) => {
    const trip = tripAt(p0, slots);
    for (const h of hs) onlineTrip(b, h, trip, { scale, softcap: s.softcap, nd, groupSum });
    trip.done();
  };
  // Tail trips (spreading's, chunking above): the loop takes the trips with more than `tail` slots in range, and a
  // last trip with at most that many runs a body of only those slots (2 or 1). The slots it drops would add
  // exp(-inf) = 0 terms at the end of the same pairwise trees: the same bits (but for the sign of a sum that is
  // exactly zero). The loop's body is the one without tails, its branches outside it: in the loop they cost the
  // whole trips 0.2-0.5% (H100, session 36).
  const tiers = splits && cut.spread > 1 ? tailTiers(U) : [U];
  if (tiers.length === 1) b.for(start, stop, G * U, (p0) => body(p0, U));
  else {
    const most = G * tiers[1], full = b.let(stop.max(start.add(most)).sub(most), "u32", "full");
    b.for(start, full, G * U, (p0) => body(p0, U));
    // the first trip the loop left: past stop, or with at most `most` positions
    const p0 = b.let(full.sub(start).add(G * U - 1).div(G * U).mul(G * U).add(start), "u32", "tail");
    const left = b.let(stop.max(p0).sub(p0), "u32", "left");
    const tier = (i: number): void => {
      if (i === tiers.length - 1) return body(p0, tiers[i]);
      b.if(left.gt(G * tiers[i + 1]), () => body(p0, tiers[i]), () => tier(i + 1));
    };
    b.if(left.gt(0), () => tier(1));
  }
  // skipEmpty: only a chunk with positions writes (and counts); chunks 0 .. active-1 have them
  const withPositions = (fusedAs?.skipEmpty || localOk) && share && len ? b.let(len.add(share).sub(1).div(share), "u32", "active") : undefined;
  const active = fusedAs?.skipEmpty ? withPositions : undefined;
  const filled = active ? b.let(start.lt(stop), "bool", "filled") : undefined;
  // local: the item's chunks with positions all in its first workgroup (Fused.local), whose teams' partials stay there
  const local = localOk && withPositions ? b.let(withPositions.le(W), "bool", "local") : undefined;
  const mem = local ? b.shared("attn_local", "f32", W * (hd + 2)) : undefined;
  // the item's first slot in the workgroup (0 where an item spans workgroups)
  const slot0 = local && S < W ? b.let(trow.sub(chunkIdx!).mod(W), "u32", "s0") : u32(0);
  for (const { it, qbase, m, l, acc } of hs) {
    mergeGroups(b, { m, l, acc }, lpp, t.lanes);
    // partials at (item, chunk): the ungrouped team's own row of the part buffer
    const obase = splits ? b.let((gq === 1 ? trow : it.mul(S).add(chunkIdx!)).mul(hd + 2), "u32", "ob") : qbase;
    /** The head's output, or its partial [m, l, acc] from word `at` on, through `st` (into `out` or shared memory). */
    const writes = (st: (at: Val, v: Val) => void, at: Val) => {
      const dims = splits ? at.add(2) : at;
      const writeDims = () => {
        for (let j = 0; j < nd; j++) {
          const ok = valid(j), one = () => st(dims.add(d0).add(j), splits ? acc[j] : acc[j].div(l));
          if (ok === true) one();
          else b.if(ok, one);
        }
      };
      if (G > 1) b.if(gi.eq(u32(0)), writeDims);
      else writeDims();
      if (splits) {
        const head = () => {
          st(at, m);
          st(at.add(1), l);
        };
        if (t.lanes === 1) head();
        else b.if(lane.eq(u32(0)), head);
      }
    };
    const toOut = () => writes((i, v) => b.store(out, i, v), obase);
    const global = () => (filled ? b.if(filled, toOut) : toOut());
    if (local && mem) {
      // a team of the first workgroup: its partial at its chunk's slot (empty chunks' too: their (-inf, 0, 0))
      const sb = b.let(slot0.add(chunkIdx!).mul(hd + 2), "u32", "sb");
      b.if(local, () => b.if(chunkIdx!.lt(W), () => writes((i, v) => b.sstore(mem, i, v), sb)), global);
    } else global();
  }
  if (final) {
    const per = Math.min(S, W); // an item's teams in the workgroup
    const inWg = local && mem
      ? { local, mem, per, slot0, first: chunkIdx!.lt(W), lid: b.let(chunkIdx!.mul(t.lanes).add(lane), "u32", "lid"), size: per * t.lanes }
      : undefined;
    fuseCombine(b, out, final, { item, lane, lanes: t.lanes, items, splits: S, hd, count: fusedAs!.count, active, filled, local: inWg, prep: fusedAs!.prep });
  }
  return b.build();
}

/**
 * A loop's trip bodies: U slots, then its tail trips' 2 and 1. No 4: an 8B row at 48 positions spread over 8 teams
 * of 4 slots measured slower than whole trips (README, session 36), and each body is code lavapipe compiles.
 */
function tailTiers(U: number): number[] {
  return U > 2 ? [U, 2, 1] : U === 2 ? [2, 1] : [U];
}

/**
 * A row's split-K chunk: the live positions spread over as many of the S teams as get a whole trip (`trip`
 * positions) each, at most S: a short context takes one trip on a few teams (the rest find an empty chunk and skip
 * the loop) instead of a few positions on every team, whose K/V loads mostly fetch masked rows; a long one is cut
 * in S equal chunks. With `spread`, a row of at most spread x tail slots (`step` positions each) takes a slot on
 * each of up to `spread` teams instead (liveChunks). It depends on this row's positions only (as the order of its
 * sums must).
 */
export function chunkOf(
  b: KernelBuilder,
  o: { first?: Val; end: Val; chunkIdx: Val; S: number; trip: number; step?: number; spread?: number; tail?: number },
): { start: Val; stop: Val; share: Val; len: Val } {
  const { first, end, chunkIdx, S, trip, step = trip, spread = 1, tail = 1 } = o;
  const len = b.let(first ? end.sub(first) : end, "u32", "len");
  const whole = len.add(trip - 1).div(trip);
  const spreadOf = () => len.le(spread * tail * step).select(whole.max(len.add(step - 1).div(step).min(spread)), whole);
  const live = S === 1 ? u32(1) : b.let((spread > 1 ? spreadOf() : whole).max(1).min(S), "u32", "live");
  const share = b.let(len.add(live).sub(1).div(live), "u32", "share");
  const chunk = chunkIdx.mul(share);
  const start = b.let((first ? first.add(chunk) : chunk).min(end), "u32", "start");
  return { start, stop: b.let(end.min(start.add(share)), "u32", "stop"), share, len };
}

/**
 * Pool row of a row's logical position p through its block table (entries checked against the pool). With `lane`
 * (a subgroup team whose chunk start .. stop spans at most its lanes in blocks), lane i loads the entry of the
 * chunk's i-th block once and a position's block comes by shuffle, so a trip waits on its K/V loads alone instead
 * of a table load and then them; the same entries are read and checked, and the same rows (bit-identical).
 */
export function pagedRows(
  b: KernelBuilder,
  o: { TB: Buffer; tbase: Val; block: number; maxBlocks: number; poolBlocks: number; lane?: Val; start: Val; stop: Val },
): (p: Val) => Val {
  const { TB, tbase, block, lane, start, stop } = o;
  const entryAt = (i: Val) => asIndex(b.load(TB, i));
  if (!lane) {
    return (p) => {
      const blk = b.let(entryAt(tbase.add(p.div(block))), "u32", "blk");
      b.check(blk.lt(o.poolBlocks), FAULT.PAGED_BLOCK);
      return blk.mul(block).add(p.mod(block));
    };
  }
  const blk0 = b.let(start.div(block), "u32", "b0");
  // blocks of positions start .. stop-1 (none for an empty chunk: its entries may lie past the row's table)
  const nblk = b.let(start.lt(stop).select(stop.sub(1).div(block).add(1).sub(blk0), u32(0)), "u32", "nb");
  const mine = b.let(lane.lt(nblk), "bool", "mine");
  const entry = b.let(mine.select(entryAt(tbase.add(blk0.add(lane).min(o.maxBlocks - 1))), u32(0)), "u32", "blk");
  b.check(mine.not().or(entry.lt(o.poolBlocks)), FAULT.PAGED_BLOCK);
  return (p) => b.shuffle("idx", entry, p.div(block).sub(blk0)).mul(block).add(p.mod(block));
}

/** Merges the position groups' (m, l, acc) of a head: a butterfly over the group bits of the lane; every lane ends with the total. */
function mergeGroups(b: KernelBuilder, h: { m: Val; l: Val; acc: Val[] }, lpp: number, lanes: number): void {
  const { m, l, acc } = h;
  for (let off = lpp; off < lanes; off *= 2) {
    const mo = b.let(b.shuffle("xor", m, off), "f32", "mo"), lo = b.let(b.shuffle("xor", l, off), "f32", "lo");
    const ao = acc.map((a) => b.let(b.shuffle("xor", a, off), "f32", "ao"));
    const M = b.let(m.max(mo), "f32", "M");
    const cs = b.let(m.eq(M).select(f32(1), m.sub(M).exp()), "f32", "cs");
    const co = b.let(mo.eq(M).select(f32(1), mo.sub(M).exp()), "f32", "co");
    b.set(l, l.mul(cs).add(lo.mul(co)));
    acc.forEach((a, j) => b.set(a, a.mul(cs).add(ao[j].mul(co))));
    b.set(m, M);
  }
}
