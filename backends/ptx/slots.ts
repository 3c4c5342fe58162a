// Slot memory: small `upload` buffers (a step's token, position, sampler words) live in slabs, each one device
// allocation with a pinned host shadow of the same size. A write is a plain host memcpy into the shadow; the
// shadow reaches the device through one host-to-device copy per slab at the head of each recording that
// binds it (captured into the CUDA graph) or of an eager run. So a decode step issues no driver call for its
// slots, where a copy per slot through the staging ring cost a few microseconds each.
//
// The copy reads the shadow when the stream reaches it, so the shadow must not change while such a copy may be
// pending: the device marks the slabs busy from each replay/run until it sees the stream idle, and a write in
// between first waits (bounded) for the idle stream. An engine synchronizes every step, so that wait never
// happens on its path.
import type { Cuda } from "../../ffi/cuda.ts";
import { CU_MEMHOSTALLOC_PORTABLE } from "../../ffi/cuda.ts";
import { ptrView } from "../../ffi/lib.ts";

/** Upload buffers up to this size go to a slab; larger ones are plain allocations written through staging. */
export const SLOT_MAX = 16 << 10;
const SLAB_BYTES = 64 << 10;

export class Slab {
  used = 0;
  live = 0;
  constructor(readonly dev: bigint, readonly hostPtr: bigint, readonly host: Uint8Array) {}
}

/** A place in a slab: the buffer's device address and its host shadow. */
export interface SlotPlace {
  slab: Slab;
  offset: number;
  ptr: bigint;
  shadow: Uint8Array;
}

export class SlotSlabs {
  private current: Slab | undefined;
  private readonly slabs = new Set<Slab>();

  constructor(private readonly cu: Cuda, private readonly align: number) {}

  /** A zeroed place of `bytes` (<= SLOT_MAX); the device side is zeroed by the caller's stream memset. */
  alloc(bytes: number, zero: (ptr: bigint, n: number) => void): SlotPlace {
    const n = Math.ceil(Math.max(bytes, 16) / this.align) * this.align;
    let s = this.current;
    if (!s || s.used + n > SLAB_BYTES) {
      const dev = this.cu.memAlloc(SLAB_BYTES);
      let hostPtr: bigint;
      try {
        hostPtr = this.cu.memHostAlloc(SLAB_BYTES, CU_MEMHOSTALLOC_PORTABLE);
      } catch (e) {
        this.cu.memFree(dev);
        throw e;
      }
      const host = new Uint8Array(ptrView(hostPtr, SLAB_BYTES));
      host.fill(0);
      zero(dev, SLAB_BYTES);
      if (s && s.live === 0) this.drop(s);
      this.slabs.add(s = this.current = new Slab(dev, hostPtr, host));
    }
    const offset = s.used;
    s.used += n;
    s.live++;
    return { slab: s, offset, ptr: s.dev + BigInt(offset), shadow: s.host.subarray(offset, offset + bytes) };
  }

  /** Releases a place; a slab with nothing left in it is freed (the current one is kept for reuse). */
  free(p: SlotPlace): void {
    const s = p.slab;
    if (--s.live > 0) return;
    if (s === this.current) {
      s.used = 0;
      return;
    }
    this.drop(s);
  }

  private drop(s: Slab): void {
    this.slabs.delete(s);
    this.cu.memFree(s.dev);
    this.cu.memFreeHost(s.hostPtr);
  }

  /** Frees every slab (the stream must be idle). */
  release(): void {
    for (const s of this.slabs) this.drop(s);
    this.current = undefined;
  }
}

/** The span of each slab that some of `places` occupy: one copy per slab covers them all. */
export function slabSpans(places: Iterable<SlotPlace>): { slab: Slab; lo: number; hi: number }[] {
  const by = new Map<Slab, { slab: Slab; lo: number; hi: number }>();
  for (const p of places) {
    const e = by.get(p.slab), hi = p.offset + p.shadow.byteLength;
    if (!e) by.set(p.slab, { slab: p.slab, lo: p.offset, hi });
    else {
      e.lo = Math.min(e.lo, p.offset);
      e.hi = Math.max(e.hi, hi);
    }
  }
  return [...by.values()].filter((e) => e.hi > e.lo);
}
