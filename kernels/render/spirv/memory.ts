// Storage buffers: one descriptor binding per kernel buffer, seen through as many typed views (aliased
// variables on the same set/binding) as the kernel's loads and stores need. Everything 32-bit goes through
// a u32 view and a bitcast; 16- and 8-bit elements use 16/8-bit storage when the target has it, and
// otherwise arrive as word accesses and atomics (kernels/decomp/narrow.ts). Vector accesses of 4, 8 or 16
// bytes are one u32/uvec2/uvec4 access.
import type { AtomicOp, Buffer, CType, EType } from "../../ir.ts";
import { computeOf, ESIZE, KernelError } from "../../ir.ts";
import type { Asm } from "./asm.ts";
import * as math from "./math.ts";
import { Cap, Dec, Op, Scope, Semantics, Storage } from "./spec.ts";

type ViewKind = "u32" | "v2" | "v4" | "u16" | "u8" | "f16";

interface View {
  variable: number;
  /** Pointer-to-element type for access chains. */
  ptr: number;
  elem: number;
}

/**
 * A load's memory operands: Nontemporal (MemoryAccess 0x4) for a binding whose bytes are each read once
 * (Buffer.reads "once": a decode gemv's float weights), a hint the driver may take or leave.
 */
const memoryOperands = (buf: Buffer): number[] => (buf.reads === "once" ? [0x4] : []);

/** Converts between compute types (numeric conversion, as the IR's `cast`). */
export type Convert = (id: number, from: CType, to: CType) => number;

export class Buffers {
  private readonly views = new Map<string, View>();
  private readonly perBinding = new Map<number, View[]>();
  private readonly arrays = new Map<ViewKind, number>();
  private errorView: View | undefined;
  /** 16-/8-bit storage views were declared (the device must enable those features). */
  used16 = false;
  used8 = false;

  constructor(
    private readonly a: Asm,
    private readonly buffers: Buffer[],
    private readonly native16: boolean,
    private readonly native8: boolean,
    private readonly convert: Convert,
    private readonly names: boolean,
    /** The f16 type (declaring Float16) when the target has f16 arithmetic: f16 then widens with one OpFConvert. */
    private readonly half: (() => number) | undefined,
    /**
     * Writable bindings are Coherent: the kernel reads what other workgroups wrote in the same dispatch (after a
     * device-scope barrier), which a non-coherent cache of this one may still hold stale.
     */
    private readonly coherent = false,
    /** Read-only bindings are Restrict (SpirvOptions.restrictReads). */
    private readonly restrictReads = false,
  ) {}

  private elemType(kind: ViewKind): number {
    const m = this.a.m;
    switch (kind) {
      case "u32": return m.tU32;
      case "v2": return m.tVec(m.tU32, 2);
      case "v4": return m.tVec(m.tU32, 4);
      case "u16": return m.tInt(16, false);
      case "u8": return m.tInt(8, false);
      case "f16": return m.tFloat(16);
    }
  }

  private runtimeArray(kind: ViewKind): number {
    let id = this.arrays.get(kind);
    if (id === undefined) {
      const m = this.a.m;
      const stride = { u32: 4, v2: 8, v4: 16, u16: 2, u8: 1, f16: 2 }[kind];
      id = m.id();
      m.global(Op.TypeRuntimeArray, [id, this.elemType(kind)]);
      m.decorate(id, Dec.ArrayStride, stride);
      this.arrays.set(kind, id);
    }
    return id;
  }

  /** A StorageBuffer variable `struct { T data[]; }` at set 0, `binding`. */
  private declare(binding: number, kind: ViewKind, readonly: boolean, name: string): View {
    const m = this.a.m;
    if (kind === "u16" || kind === "f16") {
      this.used16 = true;
      m.capability(Cap.StorageBuffer16BitAccess);
      m.extension("SPV_KHR_16bit_storage");
    } else if (kind === "u8") {
      this.used8 = true;
      m.capability(Cap.StorageBuffer8BitAccess);
      m.extension("SPV_KHR_8bit_storage");
    }
    const struct = m.id();
    m.global(Op.TypeStruct, [struct, this.runtimeArray(kind)]);
    m.decorate(struct, Dec.Block);
    m.memberDecorate(struct, 0, Dec.Offset, 0);
    if (readonly) m.memberDecorate(struct, 0, Dec.NonWritable);
    else if (this.coherent) m.memberDecorate(struct, 0, Dec.Coherent);
    const variable = m.id();
    m.global(Op.Variable, [m.tPtr(Storage.StorageBuffer, struct), variable, Storage.StorageBuffer]);
    m.decorate(variable, Dec.DescriptorSet, 0);
    m.decorate(variable, Dec.Binding, binding);
    if (readonly && this.restrictReads) m.decorate(variable, Dec.Restrict);
    if (this.names) m.name(variable, kind === "u32" ? name : `${name}_${kind}`);
    const elem = this.elemType(kind);
    const v = { variable, ptr: m.tPtr(Storage.StorageBuffer, elem), elem };
    const list = this.perBinding.get(binding) ?? [];
    list.push(v);
    this.perBinding.set(binding, list);
    return v;
  }

  private view(buf: Buffer, kind: ViewKind): View {
    const key = `${buf.binding}:${kind}`;
    let v = this.views.get(key);
    if (!v) {
      v = this.declare(buf.binding, kind, buf.access === "r", buf.name);
      this.views.set(key, v);
    }
    return v;
  }

  private ptr(v: View, index: number): number {
    return this.a.v(Op.AccessChain, v.ptr, v.variable, this.a.cu(0), index);
  }

  /** A pointer to u32 word `index` of `buf` (cooperative matrices load from buffers through it). */
  wordPtr(buf: Buffer, index: number): number {
    return this.ptr(this.view(buf, "u32"), index);
  }

  /** Marks every binding seen through more than one view Aliased, so no view's accesses get reordered past another's. */
  finish(): void {
    for (const views of this.perBinding.values()) {
      if (views.length > 1) for (const v of views) this.a.m.decorate(v.variable, Dec.Aliased);
    }
  }

  /** Pointer to the error word (binding `binding`, word 0), declared on first use. */
  errorWord(binding: number): number {
    this.errorView ??= this.declare(binding, "u32", false, "poot_error");
    return this.ptr(this.errorView, this.a.cu(0));
  }

  // ---- element encodings ----

  /** Element bits (low bits of a u32; sign-extended i32 for i8/i16) -> the view's compute value. */
  private decode(bits: number, view: EType): number {
    const a = this.a;
    switch (view) {
      case "f32": return a.float(bits);
      case "i32": return a.v(Op.Bitcast, a.i, bits);
      case "u32": case "u16": case "u8": case "i16": case "i8": return bits;
      case "f16": return this.half ? math.f16ToF32Convert(a, bits, this.half()) : math.f16ToF32(a, bits);
      case "bf16": return math.bf16ToF32(a, bits);
    }
  }
  /** The element `shift` bits up in `word`: a u32, or for signed narrow views a sign-extended i32. */
  private extract(word: number, view: EType, shift: number): number {
    const a = this.a, width = ESIZE[view] * 8;
    if (width === 32) return word;
    if (view === "i8" || view === "i16") {
      return a.v(Op.BitFieldSExtract, a.i, a.v(Op.Bitcast, a.i, word), shift, a.cu(width));
    }
    return a.v(Op.BitFieldUExtract, a.u, word, shift, a.cu(width));
  }
  /** A value of compute type t -> the view's element bits in a u32 (upper bits clear). */
  private encode(value: number, t: CType, view: EType): number {
    const a = this.a, m = a.m;
    switch (view) {
      case "f32": return a.bits(this.convert(value, t, "f32"));
      case "i32": case "u32": return this.intBits(value, t, view);
      case "bf16": return math.f32ToBf16(a, this.convert(value, t, "f32"));
      case "f16": {
        if (t === "f16") {
          const h2 = m.tVec(m.tFloat(16), 2);
          const pair = a.v(Op.CompositeConstruct, h2, value, m.constF16(0));
          return a.and(a.u, a.v(Op.Bitcast, a.u, pair), a.cu(0xffff));
        }
        return math.f32ToF16(a, this.convert(value, t, "f32"));
      }
      default: {
        return a.and(a.u, this.intBits(value, t, view), a.cu(view === "u8" || view === "i8" ? 0xff : 0xffff));
      }
    }
  }

  private intBits(value: number, t: CType, view: EType): number {
    const ct = computeOf(view), x = this.convert(value, t, ct);
    return ct === "u32" ? x : this.a.v(Op.Bitcast, this.a.u, x);
  }

  private undecomposed(view: EType): never {
    throw new KernelError(`spirv: a ${view} access without ${ESIZE[view] * 8}-bit storage was not decomposed into words (decomp/narrow.ts)`);
  }

  // ---- scalar access ----

  /** Loads element `index` of `view` from `buf` as compute type t. */
  load(buf: Buffer, view: EType, index: number, t: CType): number {
    const a = this.a, m = a.m, size = ESIZE[view];
    if (t === "f16") {
      if (view !== "f16") throw new KernelError(`f16 load needs an f16 view, got ${view}`);
      if (!this.native16) this.undecomposed(view);
      return a.v(Op.Load, m.tFloat(16), this.ptr(this.view(buf, "f16"), index), ...memoryOperands(buf));
    }
    if (view === "f16" && this.native16 && this.half) {
      const h = a.v(Op.Load, this.half(), this.ptr(this.view(buf, "f16"), index), ...memoryOperands(buf));
      return this.convert(a.v(Op.FConvert, a.f, h), "f32", t);
    }
    let bits: number;
    if (size === 4) {
      bits = a.v(Op.Load, a.u, this.ptr(this.view(buf, "u32"), index), ...memoryOperands(buf));
    } else if ((size === 2 && this.native16) || (size === 1 && this.native8)) {
      const v = this.view(buf, size === 2 ? "u16" : "u8");
      const raw = a.v(Op.Load, v.elem, this.ptr(v, index), ...memoryOperands(buf));
      bits = view === "i8" || view === "i16" ? a.v(Op.SConvert, a.i, raw) : a.v(Op.UConvert, a.u, raw);
    } else {
      this.undecomposed(view);
    }
    return this.convert(this.decode(bits, view), computeOf(view), t);
  }

  /** Stores `value` (compute type t) into element `index` of `view`. */
  store(buf: Buffer, view: EType, index: number, value: number, t: CType): void {
    const a = this.a, size = ESIZE[view];
    if (view === "f16" && t === "f16" && this.native16) {
      a.s(Op.Store, this.ptr(this.view(buf, "f16"), index), value);
      return;
    }
    const bits = this.encode(value, t, view);
    if (size === 4) {
      a.s(Op.Store, this.ptr(this.view(buf, "u32"), index), bits);
    } else if ((size === 2 && this.native16) || (size === 1 && this.native8)) {
      const v = this.view(buf, size === 2 ? "u16" : "u8");
      a.s(Op.Store, this.ptr(v, index), a.v(Op.UConvert, v.elem, bits));
    } else {
      this.undecomposed(view);
    }
  }

  /** u32 word `index` of buf op= value, atomically (device scope, relaxed); returns the old value. */
  atomic(buf: Buffer, op: AtomicOp, index: number, value: number): number {
    const a = this.a;
    const p = this.ptr(this.view(buf, "u32"), index);
    const code = op === "and" ? Op.AtomicAnd : op === "or" ? Op.AtomicOr : Op.AtomicIAdd;
    return a.v(code, a.u, p, a.cu(Scope.Device), a.cu(Semantics.Relaxed), value);
  }

  // ---- vector access ----

  private vectorKind(bytes: number): ViewKind | undefined {
    return bytes === 4 ? "u32" : bytes === 8 ? "v2" : bytes === 16 ? "v4" : undefined;
  }

  /** Loads n consecutive elements from `index` (aligned to n) as their compute type. */
  loadv(buf: Buffer, view: EType, index: number, n: number): number[] {
    const a = this.a, m = a.m, size = ESIZE[view];
    const kind = this.vectorKind(n * size);
    if (!kind) {
      const out: number[] = [];
      for (let j = 0; j < n; j++) {
        out.push(this.load(buf, view, j ? a.iadd(a.u, index, a.cu(j)) : index, computeOf(view)));
      }
      return out;
    }
    const v = this.view(buf, kind);
    const vi = n === 1 ? index : a.shr(index, a.cu(Math.log2(n)));
    const loaded = a.v(Op.Load, v.elem, this.ptr(v, vi), ...memoryOperands(buf));
    const words: number[] = kind === "u32"
      ? [loaded]
      : Array.from({ length: kind === "v2" ? 2 : 4 }, (_, w) => a.v(Op.CompositeExtract, a.u, loaded, w));
    const out: number[] = [];
    if (view === "f16" && this.half) {
      // two halves per word widen together: one bitcast and one OpFConvert per word
      const h2 = m.tVec(this.half(), 2), f2 = m.tVec(a.f, 2);
      for (let w = 0; w < n / 2; w++) {
        const wide = a.v(Op.FConvert, f2, a.v(Op.Bitcast, h2, words[w]));
        out.push(a.v(Op.CompositeExtract, a.f, wide, 0), a.v(Op.CompositeExtract, a.f, wide, 1));
      }
      return out;
    }
    for (let j = 0; j < n; j++) {
      const byte = j * size;
      const bits = this.extract(words[byte >> 2], view, a.cu((byte & 3) * 8));
      out.push(this.decode(bits, view));
    }
    return out;
  }

  /** Stores n values (compute type ts[j]) to consecutive elements from `index` (aligned to n). */
  storev(buf: Buffer, view: EType, index: number, values: number[], ts: CType[]): void {
    const a = this.a, m = a.m, n = values.length, size = ESIZE[view];
    const kind = this.vectorKind(n * size);
    if (!kind) {
      for (let j = 0; j < n; j++) this.store(buf, view, j ? a.iadd(a.u, index, a.cu(j)) : index, values[j], ts[j]);
      return;
    }
    const nw = kind === "u32" ? 1 : kind === "v2" ? 2 : 4;
    const words: number[] = new Array(nw);
    for (let j = 0; j < n; j++) {
      const byte = j * size;
      let bits = this.encode(values[j], ts[j], view);
      if (byte & 3) bits = a.shl(a.u, bits, a.cu((byte & 3) * 8));
      const w = byte >> 2;
      words[w] = words[w] === undefined ? bits : a.or(a.u, words[w], bits);
    }
    const v = this.view(buf, kind);
    const vi = n === 1 ? index : a.shr(index, a.cu(Math.log2(n)));
    const value = nw === 1 ? words[0] : a.v(Op.CompositeConstruct, m.tVec(a.u, nw), ...words);
    a.s(Op.Store, this.ptr(v, vi), value);
  }
}
