// The standing mutation check (issue 22): each mutant breaks one thing the suite claims to cover, in a copy of
// the tree; the one test file that should notice it runs there, and the mutant is "caught" when that run fails.
// Not part of a CI run (run.sh runs it by hand, several minutes of CPU). Each `find` must occur exactly once in
// its file, so a mutant whose code moved reports "stale" instead of testing nothing.
export interface Mutant {
  name: string;
  /** What the break means. */
  what: string;
  file: string;
  find: string;
  replace: string;
  /** Test files to run (deno test -A --no-check). */
  tests: string[];
  /** POOT_BACKENDS for the run (js and lavapipe only, to stay short). */
  backends: string;
}

export const MUTANTS: Mutant[] = [
  {
    name: "gemv-long-k-x1.25",
    what: "the fused gemv kernel multiplies its output by 1.25 when k > 1000",
    file: "kernels/lib/gemv_units.ts",
    find: "b.store(pb.y, at, pb.res ? vals[d].add(b.load(pb.res, row)) : vals[d]);",
    replace: "const vd = s.k > 1000 ? vals[d].mul(1.25) : vals[d];\n          b.store(pb.y, at, pb.res ? vd.add(b.load(pb.res, row)) : vd);",
    tests: ["tests/ops/ops.test.ts"],
    backends: "js,vulkan",
  },
  {
    name: "engine-waits-past-timeout",
    what: "the engine's own bound on a device wait is 20x the timeout",
    file: "backends/executor.ts",
    find: "this.bound = new Bound(this.timeoutMs,",
    replace: "this.bound = new Bound(this.timeoutMs * 20,",
    tests: ["tests/engine/faults.test.ts"],
    backends: "js",
  },
  {
    name: "rms-epsilon-1e-6",
    what: "the GGUF RMSNorm epsilon is read as 1e-6 whatever the file says",
    file: "llm/families/llama.ts",
    find: 'rmsEps: g.optF32(k("attention.layer_norm_rms_epsilon")) ?? 1e-5,',
    replace: "rmsEps: 1e-6,",
    tests: ["tests/llm/tier3.test.ts"],
    backends: "js",
  },
  {
    name: "replay-skips-a-dispatch",
    what: "replaying a recording on the js device drops its last step (eager runs them all)",
    file: "backends/js/device.ts",
    find: "this.exec(rec.list);",
    replace: "this.exec(rec.list.length > 1 ? rec.list.slice(0, -1) : rec.list);",
    tests: ["tests/ops/ops.test.ts"],
    backends: "js",
  },
  {
    name: "fault-returns-normally",
    what: "a kernel's failed check on the js device is dropped: the step returns normally",
    file: "backends/js/device.ts",
    find: 'this.pending = new KernelFault("js", e.kernel, e.code);',
    replace: "return; // mutant: the fault is dropped",
    tests: ["tests/engine/faults.test.ts"],
    backends: "js",
  },
  {
    name: "watchdog-never-splits",
    what: "a watchdog budget never cuts a Vulkan recording into several command buffers",
    file: "backends/vulkan/recording.ts",
    find: "if (!budget || works.length === 0) return works.length ? [works.length] : [];",
    replace: "if (true) return works.length ? [works.length] : [];",
    tests: ["tests/vulkan/device.test.ts"],
    backends: "vulkan",
  },
  {
    name: "sampler-weight-x1.1",
    what: "the sample kernel's in-order draw adds each kept weight times 1.1 (its total is unchanged)",
    file: "kernels/lib/sample_pick.ts",
    find: "b.set(cum, cum.add(w));\n      b.if(pick.eq(f32(NONE)).and(cum.gt(target)), () => b.set(pick, it.idx.cast(\"f32\")));\n      b.if(w.gt",
    replace: "b.set(cum, cum.add(w.mul(1.1)));\n      b.if(pick.eq(f32(NONE)).and(cum.gt(target)), () => b.set(pick, it.idx.cast(\"f32\")));\n      b.if(w.gt",
    tests: ["tests/sampling/kernel.test.ts"],
    backends: "js,vulkan",
  },
  {
    name: "sampler-segment-weight-x1.1",
    what: "the sample kernel's draw by subgroup segments adds each kept weight times 1.1 in the segment it walks",
    file: "kernels/lib/sample_pick.ts",
    find: "b.set(cum, cum.add(w));\n      b.if(pick.eq(f32(NONE)).and(cum.gt(target)), () => b.set(pick, it.idx.cast(\"f32\")));\n    });",
    replace: "b.set(cum, cum.add(w.mul(1.1)));\n      b.if(pick.eq(f32(NONE)).and(cum.gt(target)), () => b.set(pick, it.idx.cast(\"f32\")));\n    });",
    tests: ["tests/sampling/kernel.test.ts"],
    backends: "js,vulkan",
  },
  {
    name: "tolerance-accepts-infinity",
    what: "checkClose accepts a bound that is not finite (the hole the op harness had)",
    file: "graph/tolerance.ts",
    find: 'if (tol && !(bi < Infinity)) return { index: i, actual: ai, expected: xi, bound: bi, reason: "unbounded" };',
    replace: "",
    tests: ["tests/graph/eval.test.ts"],
    backends: "js",
  },
  {
    name: "kernel-fault-poisons",
    what: "the engine treats a kernel's failed check like a lost device and poisons itself",
    file: "backends/executor.ts",
    find: "      this.spoil(e);\n      throw err;\n    }\n  }\n\n  /** A step failed",
    replace: "      this.spoil(e);\n      this.abandoned ??= `mutant: ${(err as Error).message}`;\n      throw err;\n    }\n  }\n\n  /** A step failed",
    tests: ["tests/engine/faults.test.ts"],
    backends: "js",
  },
];
