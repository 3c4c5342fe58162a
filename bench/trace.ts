// Summarizes an Nsight Systems GPU trace (`nsys stats -r cuda_gpu_trace -f csv`) of replayed decode steps: per
// kernel name, how many ran, their mean duration, and the mean idle gap before each (from the end of the
// previous GPU operation to its start), plus the totals. Gaps longer than `--split` µs count as the host's
// time between steps and are left out.
//   deno run -A bench/trace.ts trace_cuda_gpu_trace.csv [--split 20]
import { argv } from "node:process";
import { readFileSync } from "node:fs";

function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  for (const line of text.split(/\r?\n/)) {
    if (!line.trim()) continue;
    const cells: string[] = [];
    let cur = "", quoted = false;
    for (let i = 0; i < line.length; i++) {
      const ch = line[i];
      if (quoted) {
        if (ch === '"' && line[i + 1] === '"') (cur += '"', i++);
        else if (ch === '"') quoted = false;
        else cur += ch;
      } else if (ch === '"') quoted = true;
      else if (ch === ",") (cells.push(cur), cur = "");
      else cur += ch;
    }
    cells.push(cur);
    rows.push(cells);
  }
  return rows;
}

const file = argv[2];
const split = argv.includes("--split") ? Number(argv[argv.indexOf("--split") + 1]) : 20;
const rows = parseCsv(readFileSync(file, "utf8"));
const head = rows.findIndex((r) => r.some((c) => /^Start/.test(c)) && r.some((c) => /^Duration/.test(c)));
if (head < 0) throw new Error(`no header with Start and Duration in ${file}`);
const h = rows[head];
const col = (re: RegExp) => h.findIndex((c) => re.test(c));
const cs = col(/^Start/), cd = col(/^Duration/), cn = col(/^Name/);
const recs = rows.slice(head + 1).map((r) => ({ start: Number(r[cs]), dur: Number(r[cd]), name: r[cn] ?? "?" }))
  .filter((r) => Number.isFinite(r.start) && Number.isFinite(r.dur)).sort((a, b) => a.start - b.start);
const by = new Map<string, { n: number; dur: number; gap: number; gaps: number }>();
let busy = 0, idle = 0, steps = 0;
for (let i = 0; i < recs.length; i++) {
  const r = recs[i];
  const e = by.get(r.name) ?? { n: 0, dur: 0, gap: 0, gaps: 0 };
  by.set(r.name, e);
  e.n++;
  e.dur += r.dur;
  busy += r.dur;
  if (i > 0) {
    const g = r.start - (recs[i - 1].start + recs[i - 1].dur);
    if (g / 1000 <= split) {
      e.gap += g;
      e.gaps++;
      idle += g;
    } else steps++;
  }
}
console.log(`${recs.length} GPU operations in ${steps + 1} bursts: busy ${(busy / 1e6).toFixed(3)} ms, idle gaps inside bursts ${(idle / 1e6).toFixed(3)} ms`);
console.log(`${"name".padEnd(70)} ${"n".padStart(6)} ${"mean µs".padStart(9)} ${"gap µs".padStart(8)}`);
for (const [name, e] of [...by].sort((a, b) => b[1].dur + b[1].gap - a[1].dur - a[1].gap)) {
  console.log(`${name.slice(0, 70).padEnd(70)} ${String(e.n).padStart(6)} ${(e.dur / e.n / 1000).toFixed(2).padStart(9)} ${(e.gaps ? e.gap / e.gaps / 1000 : 0).toFixed(2).padStart(8)}`);
}
