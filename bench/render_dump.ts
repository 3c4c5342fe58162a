// Renders every op-harness kernel (tests/ops/cases.ts), every kernel-library case (tests/kernels/cases.ts) and
// every family's decode and prefill program (tests/families fixtures; steps, bindings and buffers too) for
// every target of kernels/render/mod.ts, one file per rendering, so that two trees' outputs can be diffed:
//   deno run -A --no-check --config A/deno.json A/bench/render_dump.ts --root A --out /tmp/a
//   deno run -A --no-check --config B/deno.json A/bench/render_dump.ts --root B --out /tmp/b && diff -r /tmp/a /tmp/b
// (issue 15: a refactor that only moves code must leave every rendering byte-identical).
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

const { values } = parseArgs({ options: { root: { type: "string" }, out: { type: "string" } } });
const ROOT = values.root ?? fileURLToPath(new URL("..", import.meta.url));
const OUT = values.out;
if (!OUT) throw new Error("usage: render_dump.ts [--root TREE] --out DIR");
const { opCases } = await import(`${ROOT}/tests/ops/cases.ts`);
const { cases: kcases } = await import(`${ROOT}/tests/kernels/cases.ts`);
const { compileGraph } = await import(`${ROOT}/kernels/lower.ts`);
const { TARGETS, targetFor, renderKernel } = await import(`${ROOT}/cli/render.ts`);
const { loadModel } = await import(`${ROOT}/llm/model.ts`);
const { FAMILY_DIRS, FIXTURES } = await import(`${ROOT}/tests/families/fixtures.ts`);

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
const { mkdirSync, writeFileSync } = await import("node:fs");
for (const [p, d] of files) {
  const f = `${OUT}/${p}`;
  mkdirSync(f.slice(0, f.lastIndexOf("/")), { recursive: true });
  writeFileSync(f, d);
}
console.log(`${files.size} files under ${OUT}`);
