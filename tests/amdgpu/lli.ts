// Runs an AMDGPU kernel's LLVM IR on the CPU with LLVM's interpreter/JIT (lli, from llvm's runtime package):
// the text the renderer emits, with the AMDGPU-only parts swapped for host ones (address spaces dropped, the
// work-item and workgroup ids read from globals a driver loop sets, the fault word's trap an exit), and a
// main() that runs every invocation of the grid one after another and writes every binding to stdout.
// Only kernels without barriers or subgroup ops can run this way (one invocation at a time); that leaves the
// arithmetic, math library, conversions, memory views, vectors and control flow, which is what it checks:
// the instruction semantics of the text, not the GPU (never run on hardware).
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Kernel } from "../../kernels/ir.ts";
import { walkStmts } from "../../kernels/ir.ts";
import type { AmdgpuModule } from "../../kernels/render/amdgpu/kernel.ts";

/** The lli binary, or why there is none. */
export function findLli(): string | { reason: string } {
  for (const name of ["lli-14", "lli-15", "lli"]) {
    const r = spawnSync(name, ["--version"], { encoding: "utf8" });
    if (r.status === 0) return name;
  }
  return { reason: "lli not found (apt-get install llvm-14-runtime)" };
}

/** Whether a kernel can run one invocation at a time (no barrier, no subgroup op, no shared memory). */
export function sequential(k: Kernel): boolean {
  let ok = k.shared.length === 0 && !k.uses.subgroups;
  walkStmts(k.body, (s) => {
    if (s.k === "barrier") ok = false;
  });
  return ok;
}

const hex = (b: Uint8Array) => Array.from(b, (x) => `\\${x.toString(16).padStart(2, "0")}`).join("");

/** The module rewritten for the host, with a driver. */
export function hostModule(m: AmdgpuModule, inputs: Uint8Array[]): string {
  const k = m.kernel;
  let ll = m.ll
    .replace(/^target triple = .*$/m, "")
    .replace(/, addrspace\(5\)/g, "")
    .replace(/ addrspace\(\d\)/g, "")
    .replace(/amdgpu_kernel /g, "")
    .replace(/ readnone/g, "")
    .replace(/call (\w+) @llvm\.amdgcn\.(workitem|workgroup)\.id\.([xyz])\(\)/g, (_, t, kind, d) => `call ${t} @host.${kind}.${d}()`)
    .replace(/^declare .*@llvm\.amdgcn\.(workitem|workgroup)\.id.*$/gm, "")
    .replace(/call void @llvm\.trap\(\)/g, "call void @host.trap()");
  const lines: string[] = [ll];
  inputs.forEach((b, i) => lines.push(`@buf${i} = global [${b.byteLength} x i8] c"${hex(b)}", align 16`));
  lines.push(`@fault = global i32 0, align 4`);
  for (const kind of ["workitem", "workgroup"]) {
    lines.push(`@host.${kind} = global [3 x i32] zeroinitializer`);
    "xyz".split("").forEach((d, i) => {
      lines.push(`define i32 @host.${kind}.${d}() {\n  %p = getelementptr [3 x i32], ptr @host.${kind}, i32 0, i32 ${i}\n  %v = load i32, ptr %p\n  ret i32 %v\n}`);
    });
  }
  lines.push(`declare i64 @write(i32, ptr, i64)`, `declare void @exit(i32)`);
  lines.push(`define void @host.trap() {\n  %c = load i32, ptr @fault\n  call void @exit(i32 %c)\n  ret void\n}`);
  // main: for each workgroup and invocation, set the ids and call the kernel; then write every buffer out.
  const args = [...inputs.map((_, i) => `ptr @buf${i}`), ...(m.faultParam ? ["ptr @fault"] : [])].join(", ");
  const body: string[] = [];
  const dims = [...k.grid, ...k.workgroup];
  const names = ["gz", "gy", "gx", "lz", "ly", "lx"];
  const bound = [k.grid[2], k.grid[1], k.grid[0], k.workgroup[2], k.workgroup[1], k.workgroup[0]];
  void dims;
  body.push("entry:");
  for (const n of names) body.push(`  %${n}.slot = alloca i32`, `  store i32 0, ptr %${n}.slot`);
  body.push(`  br label %${names[0]}.head`);
  names.forEach((n, i) => {
    body.push(`${n}.head:`, `  %${n} = load i32, ptr %${n}.slot`, `  %${n}.ok = icmp ult i32 %${n}, ${bound[i]}`);
    const inner = i + 1 < names.length ? `${names[i + 1]}.init` : "call";
    body.push(`  br i1 %${n}.ok, label %${inner}, label %${i === 0 ? "done" : `${names[i - 1]}.next`}`);
    if (i + 1 < names.length) body.push(`${names[i + 1]}.init:`, `  store i32 0, ptr %${names[i + 1]}.slot`, `  br label %${names[i + 1]}.head`);
  });
  body.push("call:");
  ["x", "y", "z"].forEach((d, i) => {
    body.push(`  %wg.${d} = getelementptr [3 x i32], ptr @host.workgroup, i32 0, i32 ${i}`, `  store i32 %g${d}, ptr %wg.${d}`);
    body.push(`  %wi.${d} = getelementptr [3 x i32], ptr @host.workitem, i32 0, i32 ${i}`, `  store i32 %l${d}, ptr %wi.${d}`);
  });
  body.push(`  call void @${m.entry}(${args})`, `  br label %lx.next`);
  names.forEach((n) => body.push(`${n}.next:`, `  %${n}.inc = add i32 %${n}, 1`, `  store i32 %${n}.inc, ptr %${n}.slot`, `  br label %${n}.head`));
  body.push("done:");
  inputs.forEach((b, i) => body.push(`  call i64 @write(i32 1, ptr @buf${i}, i64 ${b.byteLength})`));
  body.push("  ret i32 0");
  lines.push(`define i32 @main() {\n${body.join("\n")}\n}`);
  ll = lines.join("\n");
  return ll;
}

/** Runs the module on the host: every binding's bytes afterwards, or the exit status of a trap. */
export function runOnHost(lli: string, m: AmdgpuModule, inputs: Uint8Array[]): Uint8Array[] | { trap: number; stderr: string } {
  const dir = mkdtempSync(join(tmpdir(), "poot-lli-"));
  try {
    const file = join(dir, "k.ll");
    writeFileSync(file, hostModule(m, inputs));
    const r = spawnSync(lli, ["--opaque-pointers", file], { maxBuffer: 1 << 28, timeout: 120_000 });
    if (r.status !== 0) return { trap: r.status ?? -1, stderr: String(r.stderr).slice(0, 2000) };
    const out = new Uint8Array(r.stdout);
    const bufs: Uint8Array[] = [];
    let off = 0;
    for (const b of inputs) {
      bufs.push(out.slice(off, off + b.byteLength));
      off += b.byteLength;
    }
    if (off !== out.byteLength) throw new Error(`lli wrote ${out.byteLength} bytes, expected ${off}`);
    return bufs;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
