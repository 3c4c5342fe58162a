// How the WGSL renderer stores element views in u32-word bindings (see wgsl.ts's header): which declaration
// each binding gets (plain words, vec2/vec4 words for wide vector access, atomic words for narrow stores), and
// the WGSL that reads and writes any element view through it.
import type { Buffer, CType, EType, Kernel } from "../ir.ts";
import { ESIZE, KernelError } from "../ir.ts";

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

  // ---- element codecs (32-bit views only: narrower ones arrive as words, kernels/decomp/narrow.ts) ----

  private narrow(view: EType): never {
    throw new KernelError(`${this.k.name}: wgsl: a ${view} access was not decomposed into words (decomp/narrow.ts)`);
  }
  /** The value of a 32-bit `view` element held in word `w`. */
  decode(view: EType, w: string): string {
    switch (view) {
      case "f32": return `bitcast<f32>(${w})`;
      case "i32": return `bitcast<i32>(${w})`;
      case "u32": return w;
    }
    return this.narrow(view);
  }
  /** u32 bits of value expression `v` (of type t) stored as a 32-bit `view`. */
  encode(view: EType, v: string, t: CType): string {
    switch (view) {
      case "f32": return `bitcast<u32>(${this.host.conv(v, t, "f32")})`;
      case "i32": return `bitcast<u32>(${this.host.conv(v, t, "i32")})`;
      case "u32": return this.host.conv(v, t, "u32");
    }
    return this.narrow(view);
  }

  load(b: Buffer, view: EType, i: string, _as: CType): string {
    return this.decode(view, this.word(b, i));
  }

  /** Statements writing `vals` (value expressions of types ts) as consecutive 32-bit `view` elements from q. */
  storeRun(b: Buffer, view: EType, q: string, vals: string[], ts: CType[]): string[] {
    const x = this.info(b);
    if (ESIZE[view] !== 4) this.narrow(view);
    const words = vals.map((v, j) => this.encode(view, v, ts[j]));
    const nw = words.length;
    if (!x.atomic && nw === x.words && nw > 1) {
      return [`${x.decl}[${q} >> ${Math.log2(nw)}u] = vec${nw}<u32>(${words.join(", ")});`];
    }
    if (nw === 1) return [this.setWord(b, q, words[0])];
    return [`{ let wi = ${q};`, ...words.map((v, j) => "  " + this.setWord(b, `wi + ${j}u`, v)), "}"];
  }

  /** Statements loading n consecutive 32-bit `view` elements from q into `dst` variables. */
  loadRun(b: Buffer, view: EType, q: string, dst: string[]): string[] {
    const x = this.info(b);
    if (ESIZE[view] !== 4) this.narrow(view);
    const nw = dst.length;
    const lines: string[] = [`let wi = ${q};`];
    const ws: string[] = [];
    if (!x.atomic && nw > 1 && x.words >= nw) {
      if (x.words === nw) {
        lines.push(`let wv = ${x.decl}[wi >> ${Math.log2(nw)}u];`);
        for (let j = 0; j < nw; j++) ws.push(`wv[${j}]`);
      } else { // 8 bytes out of a vec4 declaration
        lines.push(`let wv = ${x.decl}[wi >> 2u]; let wo = wi & 2u;`);
        for (let j = 0; j < nw; j++) ws.push(`wv[wo + ${j}u]`);
      }
    } else {
      for (let j = 0; j < nw; j++) {
        lines.push(`let w${j} = ${this.word(b, j ? `wi + ${j}u` : "wi")};`);
        ws.push(`w${j}`);
      }
    }
    dst.forEach((d, j) => lines.push(`${d} = ${this.decode(view, ws[j])};`));
    return lines;
  }
}
