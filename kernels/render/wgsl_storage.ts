// How the WGSL renderer stores element views in u32-word bindings (see wgsl.ts's header): which declaration
// each binding gets (plain words, vec2/vec4 words for wide vector access, atomic words for narrow stores), and
// the WGSL that reads and writes any element view through it.
import type { Buffer, CType, EType, Kernel } from "../ir.ts";
import { computeOf, ESIZE, KernelError } from "../ir.ts";

export interface BufInfo {
  decl: string;
  words: 1 | 2 | 4;
  atomic: boolean;
  stored: boolean;
}

/** What the storage code needs from the renderer: helper registration and value conversion. */
export interface StorageHost {
  /** Registers a wgsl_math helper; returns its name. */
  need(name: string): string;
  /** Registers a per-kernel helper function (made once); returns its name. */
  fn(name: string, code: () => string): string;
  /** Converts an expression between compute types with the IR's semantics. */
  conv(x: string, from: CType, t: CType): string;
}

export class WordStorage {
  constructor(readonly k: Kernel, readonly bufs: Map<number, BufInfo>, readonly host: StorageHost) {}

  info(b: Buffer): BufInfo {
    const i = this.bufs.get(b.binding);
    if (!i || this.k.buffers[b.binding] !== b && this.k.buffers[b.binding]?.name !== b.name) {
      throw new KernelError(`${this.k.name}: buffer ${b.name} is not declared by the kernel`);
    }
    return i;
  }
  // ---- words of a binding -----------------------------------------------------------------------------

  /** Reads word `i` (an expression) of a binding. */
  word(b: Buffer, i: string): string {
    const x = this.info(b);
    if (x.atomic) return `atomicLoad(&${x.decl}[${i}])`;
    if (x.words === 1) return `${x.decl}[${i}]`;
    return `${this.wordFn(b)}(${i})`;
  }
  wordFn(b: Buffer): string {
    const x = this.info(b);
    const sh = x.words === 4 ? 2 : 1;
    return this.host.fn(`w_${x.decl}`, () =>
      `fn w_${x.decl}(i: u32) -> u32 { return ${x.decl}[i >> ${sh}u][i & ${x.words - 1}u]; }`);
  }
  /** A statement writing word `i`. */
  setWord(b: Buffer, i: string, v: string): string {
    const x = this.info(b);
    if (x.atomic) return `atomicStore(&${x.decl}[${i}], ${v});`;
    if (x.words === 1) return `${x.decl}[${i}] = ${v};`;
    const sh = x.words === 4 ? 2 : 1;
    const f = this.host.fn(`sw_${x.decl}`, () =>
      `fn sw_${x.decl}(i: u32, v: u32) { ${x.decl}[i >> ${sh}u][i & ${x.words - 1}u] = v; }`);
    return `${f}(${i}, ${v});`;
  }

  // ---- element codecs ------------------------------------------------------------------------------

  /** The value of a `view` element held in word `w` at bit `sh` (a constant or an expression). */
  decode(view: EType, w: string, sh: number | string, as: CType): string {
    const c = typeof sh === "number";
    const shifted = c && sh === 0 ? w : `(${w} >> ${c ? `${sh}u` : sh})`;
    switch (view) {
      case "f32": return `bitcast<f32>(${w})`;
      case "i32": return `bitcast<i32>(${w})`;
      case "u32": return w;
      case "f16":
        if (as === "f16") return `f16(unpack2x16float(${shifted}).x)`; // exact; Naga mistypes bitcast<vec2<f16>>
        return c ? `unpack2x16float(${w})[${(sh as number) >> 4}]` : `unpack2x16float(${shifted}).x`;
      case "bf16":
        if (c) return sh === 0 ? `bitcast<f32>(${w} << 16u)` : `bitcast<f32>(${w} & 0xffff0000u)`;
        return `bitcast<f32>(${shifted} << 16u)`;
      case "u16": return `(${shifted} & 0xffffu)`;
      case "u8": return `(${shifted} & 0xffu)`;
      case "i16": return `(bitcast<i32>(${w} << ${c ? `${16 - (sh as number)}u` : `(16u - ${sh})`}) >> 16u)`;
      case "i8": return `(bitcast<i32>(${w} << ${c ? `${24 - (sh as number)}u` : `(24u - ${sh})`}) >> 24u)`;
    }
  }
  /** u32 bits (masked to the element width) of value expression `v` (of type t) stored as `view`. */
  encode(view: EType, v: string, t: CType): string {
    switch (view) {
      case "f32": return `bitcast<u32>(${this.host.conv(v, t, "f32")})`;
      case "i32": return `bitcast<u32>(${this.host.conv(v, t, "i32")})`;
      case "u32": return this.host.conv(v, t, "u32");
      case "f16":
        if (t === "f16") return `(pack2x16float(vec2<f32>(f32(${v}), 0.0f)) & 0xffffu)`; // exact: the value is an f16
        return `${this.host.need("p_f2h")}(${this.host.conv(v, t, "f32")})`;
      case "bf16": return `${this.host.need("p_f2bf")}(${this.host.conv(v, t, "f32")})`;
      case "u16": return `(${this.host.conv(v, t, "u32")} & 0xffffu)`;
      case "u8": return `(${this.host.conv(v, t, "u32")} & 0xffu)`;
      case "i16": return `(bitcast<u32>(${this.host.conv(v, t, "i32")}) & 0xffffu)`;
      case "i8": return `(bitcast<u32>(${this.host.conv(v, t, "i32")}) & 0xffu)`;
    }
  }

  load(b: Buffer, view: EType, i: string, as: CType): string {
    const x = this.info(b);
    const sz = ESIZE[view];
    if (sz === 4) return this.decode(view, this.word(b, i), 0, as);
    const f = this.host.fn(`ld_${x.decl}_${view}${as === "f16" ? "h" : ""}`, () => {
      const per = 4 / sz;
      const w = this.word(b, `i >> ${Math.log2(per)}u`);
      const sh = `((i & ${per - 1}u) * ${sz * 8}u)`;
      return `fn ld_${x.decl}_${view}${as === "f16" ? "h" : ""}(i: u32) -> ${as} { let w = ${w}; let sh = ${sh}; ` +
        `return ${this.decode(view, "w", "sh", as)}; }`;
    });
    return `${f}(${i})`;
  }

  /** Statements writing `vals` (value expressions of types ts) as consecutive `view` elements from q. */
  storeRun(b: Buffer, view: EType, q: string, vals: string[], ts: CType[]): string[] {
    const x = this.info(b);
    const sz = ESIZE[view];
    const bytes = vals.length * sz;
    const bits = vals.map((v, j) => this.encode(view, v, ts[j]));
    if (bytes < 4) {
      // Part of one word: clear and set our bits atomically (see the header).
      const per = 4 / sz;
      const mask = bytes === 1 ? 0xff : 0xffff;
      let v = bits[0];
      for (let j = 1; j < bits.length; j++) v = `(${v} | (${bits[j]} << ${j * sz * 8}u))`;
      const wi = `(${q} >> ${Math.log2(per)}u)`;
      const sh = `((${q} & ${per - 1}u) * ${sz * 8}u)`;
      return [
        `{ let wi = ${wi}; let sh = ${sh};`,
        `  atomicAnd(&${x.decl}[wi], ~(${mask}u << sh)); atomicOr(&${x.decl}[wi], ${v} << sh); }`,
      ];
    }
    const nw = bytes / 4, per = 4 / sz;
    const words: string[] = [];
    for (let w = 0; w < nw; w++) {
      let v = bits[w * per];
      for (let j = 1; j < per; j++) v = `(${v} | (${bits[w * per + j]} << ${j * sz * 8}u))`;
      words.push(v);
    }
    const wi = sz === 4 ? q : `(${q} >> ${Math.log2(per)}u)`;
    if (!x.atomic && nw === x.words && nw > 1) {
      return [`${x.decl}[${wi} >> ${Math.log2(nw)}u] = vec${nw}<u32>(${words.join(", ")});`];
    }
    if (nw === 1) return [this.setWord(b, wi, words[0])];
    return [`{ let wi = ${wi};`, ...words.map((v, j) => "  " + this.setWord(b, `wi + ${j}u`, v)), "}"];
  }

  /** Statements loading n consecutive `view` elements from q into `dst` variables. */
  loadRun(b: Buffer, view: EType, q: string, dst: string[]): string[] {
    const x = this.info(b);
    const sz = ESIZE[view];
    const bytes = dst.length * sz;
    const as = computeOf(view);
    const lines: string[] = [];
    if (bytes < 4) {
      const per = 4 / sz;
      lines.push(`let w = ${this.word(b, `(${q} >> ${Math.log2(per)}u)`)}; let sh = ((${q} & ${per - 1}u) * ${sz * 8}u);`);
      dst.forEach((d, j) => lines.push(`${d} = ${this.decode(view, "w", j ? `(sh + ${j * sz * 8}u)` : "sh", as)};`));
      return lines;
    }
    const nw = bytes / 4, per = 4 / sz;
    const wi = sz === 4 ? q : `(${q} >> ${Math.log2(per)}u)`;
    const ws: string[] = [];
    if (!x.atomic && nw > 1 && x.words >= nw) {
      lines.push(`let wi = ${wi};`);
      if (x.words === nw) {
        lines.push(`let wv = ${x.decl}[wi >> ${Math.log2(nw)}u];`);
        for (let j = 0; j < nw; j++) ws.push(`wv[${j}]`);
      } else { // 8 bytes out of a vec4 declaration
        lines.push(`let wv = ${x.decl}[wi >> 2u]; let wo = wi & 2u;`);
        for (let j = 0; j < nw; j++) ws.push(`wv[wo + ${j}u]`);
      }
    } else {
      lines.push(`let wi = ${wi};`);
      for (let j = 0; j < nw; j++) {
        lines.push(`let w${j} = ${this.word(b, j ? `wi + ${j}u` : "wi")};`);
        ws.push(`w${j}`);
      }
    }
    dst.forEach((d, j) => lines.push(`${d} = ${this.decode(view, ws[Math.floor(j / per)], (j % per) * sz * 8, as)};`));
    return lines;
  }
}
