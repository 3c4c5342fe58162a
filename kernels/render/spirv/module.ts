// A SPIR-V module under construction: id allocation, the logical-layout sections, and caches so that each
// type and constant is declared once. Instructions are plain words; `assemble` lays the sections out in the
// order the specification requires (2.4 Logical Layout of a Module).
import {
  AddressingLogical, ExecutionModeLocalSize, ExecutionModelGLCompute, MAGIC, MemoryModelGLSL450, MemoryModelVulkan, Op, VERSION_1_3,
} from "./spec.ts";

// f32 bits and f16 constants round as the host does everywhere else (graph/half.ts).
import { f32Bits, f32ToF16 as f16Bits } from "../../../graph/half.ts";
export { f16Bits, f32Bits };

function stringWords(s: string): number[] {
  const bytes = new TextEncoder().encode(s);
  const n = (bytes.length >> 2) + 1; // always room for the terminating NUL
  const w = new Array<number>(n).fill(0);
  for (let i = 0; i < bytes.length; i++) w[i >> 2] |= bytes[i] << ((i & 3) * 8);
  return w.map((x) => x >>> 0);
}

function push(out: number[], op: number, operands: readonly number[]): void {
  out.push(((operands.length + 1) << 16) | op);
  for (const x of operands) out.push(x >>> 0);
}

export class SpirvModule {
  private bound = 1;
  private readonly caps = new Set<number>();
  private readonly exts = new Set<string>();
  private readonly names: number[] = [];
  private readonly annotations: number[] = [];
  private readonly globals: number[] = [];
  private readonly cache = new Map<string, number>();
  private glslId = 0;
  /** The Vulkan memory model instead of GLSL450's (a module with cooperative matrices; no Coherent bindings). */
  vulkanMemoryModel = false;
  /** The function bodies (one entry function here). */
  readonly code: number[] = [];

  id(): number {
    return this.bound++;
  }
  capability(c: number): void {
    this.caps.add(c);
  }
  extension(name: string): void {
    this.exts.add(name);
  }
  /** The GLSL.std.450 import, declared on first use. */
  glsl(): number {
    if (!this.glslId) this.glslId = this.id();
    return this.glslId;
  }
  name(id: number, s: string): void {
    push(this.names, Op.Name, [id, ...stringWords(s)]);
  }
  decorate(id: number, dec: number, ...lits: number[]): void {
    push(this.annotations, Op.Decorate, [id, dec, ...lits]);
  }
  memberDecorate(type: number, member: number, dec: number, ...lits: number[]): void {
    push(this.annotations, Op.MemberDecorate, [type, member, dec, ...lits]);
  }
  /** Appends a global declaration (type, constant, variable) whose result id is `id`. */
  global(op: number, operands: readonly number[]): void {
    push(this.globals, op, operands);
  }

  /** A type or constant declared once per key; `make(id)` returns its operands (result id included). */
  cached(key: string, op: number, make: (id: number) => number[]): number {
    let id = this.cache.get(key);
    if (id === undefined) {
      id = this.id();
      this.cache.set(key, id);
      push(this.globals, op, make(id));
    }
    return id;
  }

  // ---- types ----
  get tVoid(): number { return this.cached("void", Op.TypeVoid, (id) => [id]); }
  get tBool(): number { return this.cached("bool", Op.TypeBool, (id) => [id]); }
  tInt(width: 8 | 16 | 32, signed: boolean): number {
    return this.cached(`int${width}${signed ? "s" : "u"}`, Op.TypeInt, (id) => [id, width, signed ? 1 : 0]);
  }
  tFloat(width: 16 | 32): number {
    return this.cached(`float${width}`, Op.TypeFloat, (id) => [id, width]);
  }
  get tU32(): number { return this.tInt(32, false); }
  get tI32(): number { return this.tInt(32, true); }
  get tF32(): number { return this.tFloat(32); }
  tVec(elem: number, n: number): number {
    return this.cached(`vec${elem}x${n}`, Op.TypeVector, (id) => [id, elem, n]);
  }
  tPtr(storage: number, type: number): number {
    return this.cached(`ptr${storage}:${type}`, Op.TypePointer, (id) => [id, storage, type]);
  }
  tArray(elem: number, count: number): number {
    const len = this.constU32(count);
    return this.cached(`arr${elem}x${count}`, Op.TypeArray, (id) => [id, elem, len]);
  }
  tFn(ret: number): number {
    return this.cached(`fn${ret}`, Op.TypeFunction, (id) => [id, ret]);
  }

  // ---- constants ----
  constU32(v: number): number {
    const w = v >>> 0;
    return this.cached(`u32:${w}`, Op.Constant, (id) => [this.tU32, id, w]);
  }
  constI32(v: number): number {
    const w = v | 0;
    return this.cached(`i32:${w}`, Op.Constant, (id) => [this.tI32, id, w >>> 0]);
  }
  constF32(v: number): number {
    const w = f32Bits(v);
    return this.cached(`f32:${w}`, Op.Constant, (id) => [this.tF32, id, w]);
  }
  constF16(v: number): number {
    const w = f16Bits(v);
    return this.cached(`f16:${w}`, Op.Constant, (id) => [this.tFloat(16), id, w]);
  }
  constBool(v: boolean): number {
    return v
      ? this.cached("true", Op.ConstantTrue, (id) => [this.tBool, id])
      : this.cached("false", Op.ConstantFalse, (id) => [this.tBool, id]);
  }

  /** The finished module: one GLCompute entry point `main` with the given interface and local size. */
  assemble(entry: number, iface: number[], local: [number, number, number]): Uint32Array {
    const out: number[] = [MAGIC, VERSION_1_3, 0, this.bound, 0];
    for (const c of [...this.caps].sort((a, b) => a - b)) push(out, Op.Capability, [c]);
    for (const e of this.exts) push(out, Op.Extension, stringWords(e));
    if (this.glslId) push(out, Op.ExtInstImport, [this.glslId, ...stringWords("GLSL.std.450")]);
    push(out, Op.MemoryModel, [AddressingLogical, this.vulkanMemoryModel ? MemoryModelVulkan : MemoryModelGLSL450]);
    push(out, Op.EntryPoint, [ExecutionModelGLCompute, entry, ...stringWords("main"), ...iface]);
    push(out, Op.ExecutionMode, [entry, ExecutionModeLocalSize, ...local]);
    out[3] = this.bound;
    const parts = [out, this.names, this.annotations, this.globals, this.code];
    const words = new Uint32Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      words.set(p, at); // spread would overflow the stack on large kernels
      at += p.length;
    }
    return words;
  }
}

/** Appends one instruction to a word list. */
export function inst(out: number[], op: number, ...operands: number[]): void {
  push(out, op, operands);
}
