// poot embed / poot rerank: an encoder model's two commands. Flags are checked (cli/flags.ts) before anything
// is loaded; the model must be an encoder (embed) with a one-label head (rerank), else one typed error line.
//   poot embed -m DIR --text T [--text T2 ...] [--pooling mean|cls|last] [--no-normalize] [--json]
//     --json: {"embeddings": [[...], ...]}; otherwise one line per text: "embedding I: v0 v1 ..."
//   poot rerank -m DIR --query Q --document D [--document D2 ...] [--json]
//     --json: {"scores": [...]} (raw logits, document order); otherwise "score I: S<TAB>DOCUMENT" per line
import { chooseBackend } from "../backends/open.ts";
import { Engine } from "../backends/executor.ts";
import { compileGraph } from "../kernels/lower.ts";
import { Driver } from "../llm/driver.ts";
import { loadModel } from "../llm/model.ts";
import { checkFlags, EmbedFlags, RerankFlags, UsageError } from "./flags.ts";
import { escapeControl, out } from "./io.ts";

async function withDriver<T>(modelPath: string, backend: string | undefined, job: (d: Driver) => Promise<T>): Promise<T> {
  const model = loadModel(modelPath);
  const { device } = await chooseBackend((backend ?? "auto") as Parameters<typeof chooseBackend>[0]);
  const engine = new Engine(device, { compile: compileGraph });
  let driver: Driver | undefined;
  try {
    driver = await Driver.open(model, engine);
    model.close();
    return await job(driver);
  } finally {
    if (driver) await driver.close();
    else await engine.unload();
    model.close();
  }
}

const required = (cmd: string, values: Record<string, unknown>, names: string[]) => {
  for (const n of names) if (values[n] === undefined) throw new UsageError(`${cmd}: --${n} is required`);
};

/** `poot embed`. */
export async function embedMain(values: Record<string, unknown>): Promise<number> {
  required("embed", values, ["model", "text"]);
  const f = checkFlags(EmbedFlags, values);
  if (f.normalize && f["no-normalize"]) throw new UsageError("embed: --normalize and --no-normalize: give one");
  const normalize = f.normalize ? true : f["no-normalize"] ? false : undefined;
  const vecs = await withDriver(f.model, f.backend, (d) => d.embed(f.text, { pooling: f.pooling, normalize, truncate: f.truncate }));
  const rows = vecs.map((v) => Array.from(v));
  if (f.json) out(JSON.stringify({ embeddings: rows }) + "\n");
  else rows.forEach((r, i) => out(`embedding ${i}: ${r.map((x) => x.toFixed(6)).join(" ")}\n`));
  return 0;
}

/** `poot rerank`. */
export async function rerankMain(values: Record<string, unknown>): Promise<number> {
  required("rerank", values, ["model", "query", "document"]);
  const f = checkFlags(RerankFlags, values);
  const scores = await withDriver(f.model, f.backend, (d) => d.rerank(f.query, f.document));
  if (f.json) out(JSON.stringify({ scores }) + "\n");
  else scores.forEach((s, i) => out(`score ${i}: ${s.toFixed(6)}\t${escapeControl(f.document[i])}\n`));
  return 0;
}
