// Runs an AMDGPU kernel's LLVM IR on the CPU with LLVM's JIT (lli, from llvm's runtime package): the text
// the renderer emits, with the AMDGPU-only parts swapped for host ones (address spaces dropped; work-item and
// workgroup ids, s_barrier and ds_bpermute as calls into a pthread driver; the trap an exit that hands the
// fault word back), and a main() that runs each workgroup's invocations as threads and writes every binding to
// stdout. What it checks is the semantics of the emitted text; the AMDGPU backend's code and the hardware are
// not involved (never run on hardware).
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AmdgpuModule } from "../../kernels/render/amdgpu/kernel.ts";

/** The lli binary, or why there is none. */
export function findLli(): string | { reason: string } {
  for (const name of ["lli-14", "lli-15", "lli"]) {
    const r = spawnSync(name, ["--version"], { encoding: "utf8" });
    if (r.status === 0) return name;
  }
  return { reason: "lli not found (apt-get install llvm-14-runtime)" };
}

const TRAP_STATUS = 101;
const hex = (b: Uint8Array) => Array.from(b, (x) => `\\${x.toString(16).padStart(2, "0")}`).join("");

/**
 * The module rewritten for the host, with a driver: workgroups one after another, each invocation of a
 * workgroup a thread (so barriers and wave ops wait for each other as on the GPU): the work-item id comes from
 * pthread_getspecific, `s.barrier` is a pthread barrier of the workgroup, and `ds.bpermute` a pthread barrier
 * of the invocation's wave around an exchange array (write own value, wait, read lane addr/4 mod W, wait).
 */
export function hostModule(m: AmdgpuModule, inputs: Uint8Array[]): string {
  const k = m.kernel, W = m.wave;
  const [wx, wy, wz] = k.workgroup;
  const total = wx * wy * wz;
  const waves = Math.ceil(total / W);
  const ll = m.ll
    .replace(/^target triple = .*$/m, "")
    .replace(/, addrspace\(5\)/g, "")
    .replace(/ addrspace\(\d\)/g, "")
    .replace(/amdgpu_kernel /g, "")
    .replace(/ readnone/g, "")
    .replace(/call (\w+) @llvm\.amdgcn\.(workitem|workgroup)\.id\.([xyz])\(\)/g, (_, t, kind, d) => `call ${t} @host.${kind}.${d}()`)
    .replace(/call i32 @llvm\.amdgcn\.ds\.bpermute\(/g, "call i32 @host.bpermute(")
    .replace(/call void @llvm\.amdgcn\.s\.barrier\(\)/g, "call void @host.barrier()")
    .replace(/^declare .*@llvm\.amdgcn\.(workitem|workgroup|ds\.bpermute|s\.barrier).*$/gm, "")
    .replace(/call void @llvm\.trap\(\)/g, "call void @host.trap()");
  const L: string[] = [ll];
  inputs.forEach((b, i) => L.push(`@buf${i} = global [${b.byteLength} x i8] c"${hex(b)}", align 16`));
  L.push(
    `@fault = global i32 0, align 4`,
    `@host.wg = global [3 x i32] zeroinitializer`,
    `@host.key = global i32 0`,
    // glibc's pthread_barrier_t is 32 bytes; one for the workgroup, one per wave
    `@host.wgbar = global [32 x i8] zeroinitializer, align 8`,
    `@host.wavebar = global [${waves * 32} x i8] zeroinitializer, align 8`,
    `@host.xch = global [${waves * W} x i32] zeroinitializer, align 4`,
    `@host.threads = global [${total} x i64] zeroinitializer, align 8`,
    `declare i64 @write(i32, ptr, i64)`, `declare void @_exit(i32)`,
    `declare i32 @pthread_create(ptr, ptr, ptr, ptr)`, `declare i32 @pthread_join(i64, ptr)`,
    `declare i32 @pthread_key_create(ptr, ptr)`, `declare i32 @pthread_setspecific(i32, ptr)`, `declare ptr @pthread_getspecific(i32)`,
    `declare i32 @pthread_barrier_init(ptr, ptr, i32)`, `declare i32 @pthread_barrier_wait(ptr)`, `declare i32 @pthread_barrier_destroy(ptr)`,
    `define i32 @host.tid() {\n  %k = load i32, ptr @host.key\n  %p = call ptr @pthread_getspecific(i32 %k)\n  %i = ptrtoint ptr %p to i64\n  %t = trunc i64 %i to i32\n  %r = sub i32 %t, 1\n  ret i32 %r\n}`,
    `define i32 @host.workitem.x() {\n  %t = call i32 @host.tid()\n  %r = urem i32 %t, ${wx}\n  ret i32 %r\n}`,
    `define i32 @host.workitem.y() {\n  %t = call i32 @host.tid()\n  %q = udiv i32 %t, ${wx}\n  %r = urem i32 %q, ${wy}\n  ret i32 %r\n}`,
    `define i32 @host.workitem.z() {\n  %t = call i32 @host.tid()\n  %r = udiv i32 %t, ${wx * wy}\n  ret i32 %r\n}`,
    ...["x", "y", "z"].map((d, i) => `define i32 @host.workgroup.${d}() {\n  %p = getelementptr [3 x i32], ptr @host.wg, i32 0, i32 ${i}\n  %v = load i32, ptr %p\n  ret i32 %v\n}`),
    `define void @host.barrier() {\n  call i32 @pthread_barrier_wait(ptr @host.wgbar)\n  ret void\n}`,
    `define i32 @host.bpermute(i32 %addr, i32 %v) {
  %t = call i32 @host.tid()
  %wave = udiv i32 %t, ${W}
  %woff = mul i32 %wave, 32
  %bar = getelementptr i8, ptr @host.wavebar, i32 %woff
  %own = getelementptr [${waves * W} x i32], ptr @host.xch, i32 0, i32 %t
  store i32 %v, ptr %own
  call i32 @pthread_barrier_wait(ptr %bar)
  %word = lshr i32 %addr, 2
  %lane = and i32 %word, ${W - 1}
  %base = mul i32 %wave, ${W}
  %src = add i32 %base, %lane
  %sp = getelementptr [${waves * W} x i32], ptr @host.xch, i32 0, i32 %src
  %r = load i32, ptr %sp
  call i32 @pthread_barrier_wait(ptr %bar)
  ret i32 %r
}`,
    // the fault word's 4 bytes on stderr, then an exit status of its own (too narrow for a code); _exit, since
    // exit() from a worker thread would run LLVM's static destructors under the JIT still running main
    `define void @host.trap() {\n  call i64 @write(i32 2, ptr @fault, i64 4)\n  call void @_exit(i32 ${TRAP_STATUS})\n  ret void\n}`,
  );
  const args = [...inputs.map((_, i) => `ptr @buf${i}`), ...(m.faultParam ? ["ptr @fault"] : [])].join(", ");
  L.push(`define ptr @host.thread(ptr %arg) {
  %k = load i32, ptr @host.key
  call i32 @pthread_setspecific(i32 %k, ptr %arg)
  call void @${m.entry}(${args})
  ret ptr null
}`);
  // main: per workgroup, set its id, init the barriers, start `total` threads (tid + 1 as their key value), join.
  const body: string[] = ["entry:", "  call i32 @pthread_key_create(ptr @host.key, ptr null)", "  %g.slot = alloca i32", "  store i32 0, ptr %g.slot", "  br label %g.head"];
  const nwg = k.grid[0] * k.grid[1] * k.grid[2];
  body.push("g.head:", "  %g = load i32, ptr %g.slot", `  %g.ok = icmp ult i32 %g, ${nwg}`, "  br i1 %g.ok, label %g.body, label %done", "g.body:");
  body.push(`  %gx = urem i32 %g, ${k.grid[0]}`, `  %gq = udiv i32 %g, ${k.grid[0]}`, `  %gy = urem i32 %gq, ${k.grid[1]}`, `  %gz = udiv i32 %g, ${k.grid[0] * k.grid[1]}`);
  ["x", "y", "z"].forEach((d, i) => body.push(`  %wg.${d} = getelementptr [3 x i32], ptr @host.wg, i32 0, i32 ${i}`, `  store i32 %g${d}, ptr %wg.${d}`));
  body.push(`  call i32 @pthread_barrier_init(ptr @host.wgbar, ptr null, i32 ${total})`);
  for (let w = 0; w < waves; w++) {
    body.push(`  %wb${w} = getelementptr i8, ptr @host.wavebar, i32 ${w * 32}`, `  call i32 @pthread_barrier_init(ptr %wb${w}, ptr null, i32 ${Math.min(W, total - w * W)})`);
  }
  body.push("  %t.slot = alloca i32", "  store i32 0, ptr %t.slot", "  br label %s.head");
  body.push("s.head:", "  %s = load i32, ptr %t.slot", `  %s.ok = icmp ult i32 %s, ${total}`, "  br i1 %s.ok, label %s.body, label %j.init");
  body.push("s.body:", `  %s.th = getelementptr [${total} x i64], ptr @host.threads, i32 0, i32 %s`, "  %s1 = add i32 %s, 1", "  %s64 = zext i32 %s1 to i64",
    "  %s.arg = inttoptr i64 %s64 to ptr", "  call i32 @pthread_create(ptr %s.th, ptr null, ptr @host.thread, ptr %s.arg)", "  %s.n = add i32 %s, 1", "  store i32 %s.n, ptr %t.slot", "  br label %s.head");
  body.push("j.init:", "  store i32 0, ptr %t.slot", "  br label %j.head");
  body.push("j.head:", "  %j = load i32, ptr %t.slot", `  %j.ok = icmp ult i32 %j, ${total}`, "  br i1 %j.ok, label %j.body, label %g.next");
  body.push("j.body:", `  %j.th = getelementptr [${total} x i64], ptr @host.threads, i32 0, i32 %j`, "  %j.id = load i64, ptr %j.th", "  call i32 @pthread_join(i64 %j.id, ptr null)",
    "  %j.n = add i32 %j, 1", "  store i32 %j.n, ptr %t.slot", "  br label %j.head");
  body.push("g.next:", "  call i32 @pthread_barrier_destroy(ptr @host.wgbar)");
  for (let w = 0; w < waves; w++) body.push(`  call i32 @pthread_barrier_destroy(ptr %wb${w})`);
  body.push("  %g.n = add i32 %g, 1", "  store i32 %g.n, ptr %g.slot", "  br label %g.head", "done:");
  inputs.forEach((b, i) => body.push(`  call i64 @write(i32 1, ptr @buf${i}, i64 ${b.byteLength})`));
  body.push("  ret i32 0");
  L.push(`define i32 @main() {\n${body.join("\n")}\n}`);
  return L.join("\n");
}

/** Runs the module on the host: every binding's bytes afterwards, or the exit status of a trap. */
export function runOnHost(lli: string, m: AmdgpuModule, inputs: Uint8Array[]): Uint8Array[] | { trap: number; stderr: string } {
  const dir = mkdtempSync(join(tmpdir(), "poot-lli-"));
  try {
    const file = join(dir, "k.ll");
    writeFileSync(file, hostModule(m, inputs));
    const r = spawnSync(lli, ["--opaque-pointers", "-O0", file], { maxBuffer: 1 << 28, timeout: 120_000 });
    if (r.status === TRAP_STATUS && r.stderr.byteLength >= 4) {
      return { trap: new DataView(new Uint8Array(r.stderr).buffer).getUint32(0, true), stderr: "" };
    }
    if (r.status !== 0) throw new Error(`lli failed (status ${r.status ?? r.signal}): ${String(r.stderr).slice(0, 2000)}`);
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
