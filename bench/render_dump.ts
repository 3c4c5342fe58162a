// Renders every op-harness kernel (tests/ops/cases.ts), every kernel-library case (tests/kernels/cases.ts) and
// every family's decode and prefill program (tests/families fixtures; steps, bindings and buffers too) for
// every target of kernels/render/mod.ts, one file per rendering, so that two trees' outputs can be diffed:
//   deno run -A --no-check --config A/deno.json A/bench/render_dump.ts --root A --out /tmp/a
//   deno run -A --no-check --config B/deno.json A/bench/render_dump.ts --root B --out /tmp/b && diff -r /tmp/a /tmp/b
// (issue 15: a refactor that only moves code must leave every rendering byte-identical).
// The real shapes follow: the stories260K model file and the Llama 3.2 1B / Qwen2.5 0.5B shapes of bench/shapes.ts
// (synthetic weights, bf16 and q4_k_m), decode (1 row) and prefill (16 and 512 rows: the MMA, staged and tiled
// thresholds), each distinct kernel once per target.
import { parseFlags } from "./flags.ts";
import { fileURLToPath } from "node:url";

const { values } = parseFlags("bench/render_dump.ts", { options: { root: { type: "string" }, out: { type: "string" } } });
const ROOT = values.root ?? fileURLToPath(new URL("..", import.meta.url));
const OUT = values.out;
if (!OUT) throw new Error("usage: render_dump.ts [--root TREE] --out DIR");
const { opCases } = await import(`${ROOT}/tests/ops/cases.ts`);
const { cases: kcases } = await import(`${ROOT}/tests/kernels/cases.ts`);
const { compileGraph } = await import(`${ROOT}/kernels/lower.ts`);
const { TARGETS, targetFor, renderKernel } = await import(`${ROOT}/cli/render.ts`);
const { loadModel } = await import(`${ROOT}/llm/model.ts`);
const { FAMILY_DIRS, FIXTURES } = await import(`${ROOT}/tests/families/fixtures.ts`);
const { SHAPES } = await import(`${ROOT}/bench/shapes.ts`);
const { familyOf } = await import(`${ROOT}/llm/registry.ts`);
const { syntheticLlama } = await import(`${ROOT}/llm/synthetic.ts`);
const { dtypesFromStore } = await import(`${ROOT}/llm/families/family.ts`);

// deno-lint-ignore no-explicit-any
type Any = any;
const files = new Map<string, string | Uint8Array>();
const put = (path: string, data: string | Uint8Array) => files.set(path.replace(/[^A-Za-z0-9_./#=-]/g, "_"), data);
for (const t of TARGETS as string[]) {
  const target = targetFor(t);
  // The typical caps, and for spirv / wgsl the other storage and f16 paths.
  const variants = t === "wgsl" ? [target.caps, { ...target.caps, f16: true, subgroups: false, storage16: true }]
    : t === "spirv" ? [target.caps, { ...target.caps, storage16: false, storage8: false, f16: false, subgroups: false }]
    : [target.caps];
  for (const [vi, caps] of variants.entries()) {
    for (const c of opCases()) {
      try {
        compileGraph(c.graph, { ...target, caps }).steps.forEach((s: Any, i: number) => {
          if (s.k !== "kernel") return;
          const r = renderKernel(s.kernel, t, caps);
          put(`${t}${vi}/op/${c.name}/${i}-${s.kernel.name}.${r.ext}`, r.data);
        });
      } catch (e) {
        put(`${t}${vi}/op/${c.name}/ERROR`, String(e));
      }
    }
    for (const kc of kcases) {
      try {
        const r = renderKernel(kc.make(caps), t, caps);
        put(`${t}${vi}/k/${kc.name}.${r.ext}`, r.data);
      } catch (e) {
        put(`${t}${vi}/k/${kc.name}.ERR`, String(e));
      }
    }
  }
}
const dtypeOf = (r: { role: string }) => (/norm|bias|rope_freqs/.test(r.role) ? "f32" : "bf16");
for (const f of FAMILY_DIRS as string[]) {
  const m = loadModel(`${FIXTURES}${f}`);
  m.close();
  for (const t of TARGETS as string[]) {
    for (const rows of [1, 7]) {
      const { tracer, logits } = m.family.trace(m.config, { rows, cap: 64 }, { dtypeOf });
      tracer.output("token", tracer.argmax(rows === 1 ? logits : tracer.slice(logits, 0, rows - 1, rows), 1));
      const prog = compileGraph(tracer.build(), targetFor(t));
      const lines = prog.steps.map((s: Any) =>
        s.k === "kernel" ? `${s.kernel.name} ${JSON.stringify(s.bindings)} ${s.grid}` : `copy ${JSON.stringify(s.src)} ${JSON.stringify(s.dst)}`
      );
      put(`fam/${f}/${t}-${rows}/steps.txt`, `${lines.join("\n")}\n${JSON.stringify(prog.buffers.map((b: Any) => [b.kind, b.name, b.bytes]))}\n`);
      prog.steps.forEach((s: Any, i: number) => {
        if (s.k !== "kernel") return;
        const r = renderKernel(s.kernel, t);
        put(`fam/${f}/${t}-${rows}/${i}.${r.ext}`, r.data);
      });
    }
  }
}
// "ptx-sm90": the PTX target with the H200's caps (backends/ptx/caps.ts: MMA, staging, int8 dot), which pick the
// tensor-core, staged and flash kernels that the typical PTX caps do not.
const SM90_CAPS = (await import(`${ROOT}/backends/ptx/caps.ts`)).SM90_CAPS;
const REAL_TARGETS = [...(TARGETS as string[]), "ptx-sm90"];
const dumpPlan = (dir: string, name: string, graph: Any): void => {
  const t = name === "ptx-sm90" ? "ptx" : name;
  const caps = name === "ptx-sm90" ? SM90_CAPS : targetFor(t).caps;
  const prog = compileGraph(graph, { ...targetFor(t), caps });
  const lines = prog.steps.map((s: Any) =>
    s.k === "kernel" ? `${s.kernel.name} ${JSON.stringify(s.bindings)} ${s.grid}` : `${s.k} ${JSON.stringify({ ...s, kernel: undefined })}`
  );
  put(`${dir}/steps.txt`, `${lines.join("\n")}\n${JSON.stringify(prog.buffers.map((b: Any) => [b.kind, b.name, b.bytes]))}\n`);
  const seen = new Set<string>();
  for (const s of prog.steps) {
    if (s.k !== "kernel" || seen.has(s.kernel.name)) continue;
    seen.add(s.kernel.name);
    const r = renderKernel(s.kernel, t, caps);
    put(`${dir}/${s.kernel.name}.${r.ext}`, r.data);
  }
};
const stories = loadModel(`${ROOT}/models/stories260K/stories260K.gguf`);
stories.close();
for (const t of REAL_TARGETS) {
  for (const rows of [1, 16, 512]) {
    const { tracer, logits } = stories.family.trace(stories.config, { rows, cap: 512 }, { dtypeOf: dtypesFromStore(stories.store, stories.map) });
    tracer.output("token", tracer.argmax(rows === 1 ? logits : tracer.slice(logits, 0, rows - 1, rows), 1));
    dumpPlan(`real/stories260K-gguf/${t}-${rows}`, t, tracer.build());
  }
  for (const shape of ["stories260K", "llama-3.2-1b", "qwen2.5-0.5b"]) {
    for (const dtype of ["bf16", "q4_k_m"]) {
      const c = SHAPES[shape];
      const { dtypeOf } = syntheticLlama(c, { dtype });
      for (const rows of [1, 16, 512]) {
        const { tracer, logits } = familyOf("llama").trace(c, { rows, cap: 2048, kvDtype: "f16" }, { dtypeOf });
        tracer.output("token", tracer.argmax(rows === 1 ? logits : tracer.slice(logits, 0, rows - 1, rows), 1));
        dumpPlan(`real/${shape}-${dtype}/${t}-${rows}`, t, tracer.build());
      }
    }
  }
}
const { mkdirSync, writeFileSync } = await import("node:fs");
for (const [p, d] of files) {
  const f = `${OUT}/${p}`;
  mkdirSync(f.slice(0, f.lastIndexOf("/")), { recursive: true });
  writeFileSync(f, d);
}
console.log(`${files.size} files under ${OUT}`);
