// Cooperative matrices in the SPIR-V renderer (kernels/render/spirv.ts; SPV_KHR_cooperative_matrix, caps.coop): the
// module's memory model, the matrix types, one Function variable per CoopMat, and the four statements (zero, load
// from shared memory or a buffer, store to shared memory, multiply-add). 16 x 16 matrices of a subgroup; bf16
// operands through SPV_KHR_bfloat16.
import type { Caps } from "../../target.ts";
import type { Buffer, CoopMat, Expr, Kernel, Shared, Stmt } from "../../ir.ts";
import type { Asm } from "./asm.ts";
import type { SpirvModule } from "./module.ts";
import { Cap, FPEncodingBFloat16, MatrixLayout, MatrixUse, Op, Scope, Storage } from "./spec.ts";

/** What the matrices need of the emitter. */
export interface CoopContext {
  m: SpirvModule;
  a: Asm;
  caps: Caps;
  /** OpName the variables. */
  names: boolean;
  /** The entry function's variable declarations (words). */
  fnVars: number[];
  fail(msg: string): never;
  /** The f16 type's id (declaring the capability). */
  f16(): number;
  /** A pointer to element `index` of a shared array. */
  at(mem: Shared, index: Expr): number;
  /** A pointer to u32 word `index` of a buffer. */
  atBuffer(buf: Buffer, index: Expr): number;
}

export class CoopMats {
  private readonly vars = new Map<string, number>();
  constructor(private readonly cx: CoopContext) {}

  /**
   * A module with cooperative matrices declares the Vulkan memory model, as the extension requires; that model
   * has no Coherent decoration, which a device-scope barrier's bindings need here, so the two do not mix.
   */
  model(k: Kernel, device: boolean): void {
    const { m, caps, fail } = this.cx;
    if (!caps.coop) fail("cooperative matrices need caps.coop");
    if (device) fail("a device-scope barrier beside cooperative matrices (the Vulkan memory model has no Coherent bindings)");
    const wg = k.workgroup[0] * k.workgroup[1] * k.workgroup[2];
    if (!caps.subgroups || wg % caps.subgroupSize !== 0) fail(`cooperative matrices need whole subgroups (workgroup ${wg}, subgroup ${caps.subgroupSize})`);
    m.vulkanMemoryModel = true;
    m.capability(Cap.VulkanMemoryModel);
    m.capability(Cap.VulkanMemoryModelDeviceScope); // the checks' error-word atomics are device-scope
    m.extension("SPV_KHR_vulkan_memory_model");
    m.capability(Cap.CooperativeMatrixKHR);
    m.extension("SPV_KHR_cooperative_matrix");
  }

  /** The cooperative matrix type of `use` whose components are `c` ("f32" accumulators, "bf16"/"f16" operands). */
  private type(c: "f32" | "bf16" | "f16", use: number): number {
    const { m, caps, fail } = this.cx;
    let comp: number;
    if (c === "f32") comp = m.tF32;
    else if (c === "f16") {
      if (!caps.coop?.f16) fail("f16 cooperative matrices need caps.coop.f16");
      comp = this.cx.f16();
    } else {
      if (!caps.coop?.bf16) fail("bf16 cooperative matrices need caps.coop.bf16");
      m.capability(Cap.BFloat16TypeKHR);
      m.capability(Cap.BFloat16CooperativeMatrixKHR);
      m.extension("SPV_KHR_bfloat16");
      comp = m.cached("bfloat16", Op.TypeFloat, (id) => [id, 16, FPEncodingBFloat16]);
    }
    const n16 = m.constU32(16), scope = m.constU32(Scope.Subgroup), u = m.constU32(use);
    return m.cached(`coop:${c}:${use}`, Op.TypeCooperativeMatrixKHR, (id) => [id, comp, scope, n16, n16, u]);
  }
  private matType(c: CoopMat): number {
    return c.use === "acc" ? this.type("f32", MatrixUse.Accumulator) : this.type(c.ab!, c.use === "a" ? MatrixUse.A : MatrixUse.B);
  }

  /** The Function variable of matrix `c`. */
  declare(c: CoopMat): void {
    const { m } = this.cx;
    const id = m.id();
    this.cx.fnVars.push((4 << 16) | Op.Variable, m.tPtr(Storage.Function, this.matType(c)), id, Storage.Function);
    if (this.cx.names) m.name(id, c.name);
    this.vars.set(c.name, id);
  }
  private variable(c: CoopMat): number {
    const id = this.vars.get(c.name);
    if (id === undefined) this.cx.fail(`cooperative matrix ${c.name} is not declared`);
    return id;
  }

  stmt(s: Extract<Stmt, { k: "cmzero" | "cmload" | "cmmad" | "cmstore" }>): void {
    const { a, m, at } = this.cx;
    const load = (c: CoopMat) => a.v(Op.Load, this.matType(c), this.variable(c));
    switch (s.k) {
      case "cmzero": {
        const T = this.matType(s.acc);
        a.s(Op.Store, this.variable(s.acc), m.cached("coop:f32:zero", Op.ConstantComposite, (id) => [T, id, m.constF32(0)]));
        return;
      }
      case "cmload": {
        // B's columns are contiguous in memory: column-major for the B use
        const layout = s.dst.use === "b" ? MatrixLayout.ColumnMajor : MatrixLayout.RowMajor;
        const ptr = "binding" in s.mem ? this.cx.atBuffer(s.mem, s.index) : at(s.mem, s.index);
        const v = a.v(Op.CooperativeMatrixLoadKHR, this.matType(s.dst), ptr, m.constU32(layout), m.constU32(s.stride));
        a.s(Op.Store, this.variable(s.dst), v);
        return;
      }
      case "cmmad":
        a.s(Op.Store, this.variable(s.acc), a.v(Op.CooperativeMatrixMulAddKHR, this.matType(s.acc), load(s.a), load(s.b), load(s.acc)));
        return;
      case "cmstore":
        a.s(Op.CooperativeMatrixStoreKHR, at(s.mem, s.index), load(s.acc), m.constU32(MatrixLayout.RowMajor), m.constU32(s.stride));
        return;
    }
  }
}
