// The decode benchmark's printed table: one row per shape, the columns of the PTX issue's closing note.
import type { BenchResult, BenchRow } from "./decode.ts";

/** The H200's measured device-to-device copy rate (read + write bytes per second): the roofline by default. */
export const H200_BANDWIDTH = 4.27e12;

interface Column {
  head: string;
  cell(r: BenchRow): string;
}

const num = (x: number | undefined, digits: number): string => x === undefined || !Number.isFinite(x) ? "-" : x.toFixed(digits);

/** A percentage with one decimal, or three significant digits below 1%. */
export function pct(x: number | undefined): string {
  if (x === undefined || !Number.isFinite(x)) return "-";
  const p = 100 * x;
  return `${p >= 1 || p === 0 ? p.toFixed(1) : p.toPrecision(3)}%`;
}
function scaled(x: number, units: [number, string][]): string {
  for (const [u, name] of units) if (Math.abs(x) >= u) return `${(x / u).toFixed(2)} ${name}`;
  const [u, name] = units[units.length - 1];
  return `${(x / u).toFixed(2)} ${name}`;
}
/** Bytes in GB, MB or kB (decimal units). */
export function bytes(x: number): string {
  return scaled(x, [[1e9, "GB"], [1e6, "MB"], [1e3, "kB"]]);
}
/** A count in B, M or K. */
export function count(x: number): string {
  return scaled(x, [[1e9, "B"], [1e6, "M"], [1e3, "K"]]);
}

const COLUMNS: Column[] = [
  { head: "shape", cell: (r) => (r.variant ? `${r.shape} (${r.variant})` : r.shape) },
  { head: "weights", cell: (r) => `${r.dtype} ${bytes(r.weightBytes)}` },
  { head: "bytes/token", cell: (r) => bytes(r.replay?.bytesPerToken ?? r.weightBytesPerToken) },
  { head: "load s", cell: (r) => num(r.loadSeconds, 1) },
  { head: "compile s", cell: (r) => num(r.compileSeconds, 1) },
  { head: "dispatches", cell: (r) => r.dispatches ? String(r.dispatches) : "-" },
  { head: "eager tok/s", cell: (r) => num(r.eager?.tokPerSec, 1) },
  { head: "replay tok/s", cell: (r) => num(r.replay?.tokPerSec, 1) },
  { head: "ms/token", cell: (r) => num(r.replay?.msPerToken, 3) },
  { head: "host µs/token", cell: (r) => num(r.replay?.hostMicros, 0) },
  { head: "roofline ms", cell: (r) => r.replay && r.replay.rooflineMs < 0.001 ? r.replay.rooflineMs.toPrecision(2) : num(r.replay?.rooflineMs, 3) },
  { head: "of roofline", cell: (r) => pct(r.replay?.rooflineFraction) },
  { head: "deep pos", cell: (r) => r.deep ? String(r.deep.pos) : "-" },
  { head: "deep tok/s", cell: (r) => num(r.deep?.tokPerSec, 1) },
  { head: "deep of roofline", cell: (r) => pct(r.deep?.rooflineFraction) },
  // Per-token cost of context: the deep phase's ms per token over the replay phase's (issue 18: <= 1.10x).
  { head: "deep/pos0", cell: (r) => r.deep && r.replay ? `${(r.deep.msPerToken / r.replay.msPerToken).toFixed(2)}x` : "-" },
  { head: "eager=replay", cell: (r) => r.eagerMatchesReplay === undefined ? "-" : r.eagerMatchesReplay ? "yes" : "NO" },
];

/** Whether a device name is an H200's (the card whose copy rate is the default roofline). */
export function isH200(device: string): boolean {
  return /H200/i.test(device);
}

/** Whether the roofline is the H200's default on a device that is not an H200 (its fractions are then against the H200's). */
function borrowed(res: Omit<BenchResult, "table">): boolean {
  return res.bandwidth === H200_BANDWIDTH && !!res.device && !isH200(res.device);
}

/** The header lines and the table, columns aligned; a failed shape's error follows the table. */
export function formatTable(res: Omit<BenchResult, "table">): string {
  const cells = res.rows.map((r) => COLUMNS.map((c) => r.error && !r.replay && c.head !== "shape" && c.head !== "weights" ? "-" : c.cell(r)));
  const widths = COLUMNS.map((c, i) => Math.max(c.head.length, ...cells.map((row) => row[i].length)));
  const line = (xs: string[]) => xs.map((x, i) => i === 0 ? x.padEnd(widths[i]) : x.padStart(widths[i])).join("  ").trimEnd();
  const out = [
    `backend ${res.backend || "-"} on ${res.device || "-"} (${res.runtime}); roofline at ${num(res.bandwidth / 1e12, 2)} TB/s${borrowed(res) ? " (the H200's: --bandwidth sets this device's)" : ""}; batch 1, greedy`,
    line(COLUMNS.map((c) => c.head)),
    line(widths.map((w) => "-".repeat(w))),
    ...cells.map(line),
  ];
  for (const r of res.rows) if (r.error) out.push(`${r.shape}: ${r.error}`);
  return out.join("\n");
}
