// `poot quantize IN OUT --type f32|f16|bf16|q8_0|q4_0|q4_k_m|q5_k_m|q6_k [--allow-requantize]`: llama-quantize's
// file types with its per-tensor choices, and convert_hf_to_gguf.py's plain float types (llm/formats/quantize.ts).
// IN is a GGUF file or a Hugging Face folder, which is converted as llama.cpp's converter does it
// (llm/formats/convert.ts) on the way, one tensor at a time. The output is written to a temporary file beside OUT
// and renamed into place at the end, so a failure leaves no half-written OUT. Prints what the GGUF states
// differently from the folder (notes), one line per tensor (name, shape, from -> to, and any fallback) and a summary.
import process from "node:process";
import { parseArgs } from "node:util";
import { existsSync, realpathSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { z } from "zod";
import { openGGUF } from "../llm/formats/gguf.ts";
import { convertHF } from "../llm/formats/convert.ts";
import { loadModel } from "../llm/model.ts";
import { FILE_TYPES, QuantizeError, quantizeToGGUF } from "../llm/formats/quantize.ts";

export const QUANTIZE_USAGE = `usage: poot quantize IN OUT --type ${FILE_TYPES.join("|")} [--allow-requantize] [--quiet]
  IN is a GGUF file (f32/f16/bf16 tensors; quantized ones only with --allow-requantize) or a Hugging Face
  folder (config.json, safetensors, tokenizer.json) of a llama, mistral, qwen2, qwen3, gemma2, gemma3 or phi3
  model, written as llama.cpp's convert_hf_to_gguf.py would write it.`;

/** A bad command line (main.ts prints it and exits 2). */
export class QuantizeUsageError extends Error {
  readonly usage = true;
}

const Options = z.object({
  type: z.string({ error: "--type is required" }).transform((s) => s.toLowerCase()).pipe(
    z.enum(FILE_TYPES, { error: (i) => `--type: "${String(i.input)}" is not one of ${FILE_TYPES.join(", ")}` }),
  ),
  "allow-requantize": z.boolean().optional(),
  quiet: z.boolean().optional(),
  help: z.boolean().optional(),
});

export function quantizeMain(args: string[]): number {
  let parsed;
  try {
    parsed = parseArgs({
      args,
      options: { type: { type: "string" }, "allow-requantize": { type: "boolean" }, quiet: { type: "boolean" }, help: { type: "boolean", short: "h" } },
      allowPositionals: true,
      strict: true,
    });
  } catch (e) {
    throw new QuantizeUsageError(`quantize: ${(e as Error).message.split("\n")[0]}`);
  }
  if (parsed.values.help) {
    console.log(QUANTIZE_USAGE);
    return 0;
  }
  const opts = Options.safeParse(parsed.values);
  if (!opts.success) throw new QuantizeUsageError(`quantize: ${opts.error.issues[0].message}`);
  if (parsed.positionals.length !== 2) throw new QuantizeUsageError(`quantize: expected IN and OUT, got ${parsed.positionals.length} path${parsed.positionals.length === 1 ? "" : "s"}`);
  const [input, output] = parsed.positionals;
  const outDir = dirname(output);
  if (!existsSync(outDir) || !statSync(outDir).isDirectory()) throw new QuantizeError(`cannot write ${output}: ${outDir} is not a folder`);
  if (existsSync(output) && existsSync(input) && realpathSync(output) === realpathSync(input)) {
    throw new QuantizeUsageError("quantize: OUT is the same file as IN");
  }
  const folder = existsSync(input) && statSync(input).isDirectory();
  const tmp = `${output}.tmp-${process.pid}`;
  const quiet = opts.data.quiet === true;
  let close = () => {};
  try {
    let source;
    if (folder) {
      const m = loadModel(input);
      close = () => m.close();
      const c = convertHF(m);
      for (const n of c.notes) console.error(`note: ${n}`);
      source = { store: c.store, metadata: c.metadata };
    } else {
      const file = openGGUF(input);
      close = () => file.close();
      source = { store: file, metadata: file.metadata };
    }
    const report = quantizeToGGUF(source.store, source.metadata, tmp, opts.data.type, {
      allowRequantize: opts.data["allow-requantize"],
      onTensor: quiet ? undefined : (c, i, n) => {
        const note = c.note ? `  (${c.note})` : "";
        console.log(`[${String(i + 1).padStart(String(n).length)}/${n}] ${c.name} [${c.shape.join(", ")}] ${c.from} -> ${c.to}${note}`);
      },
    });
    renameSync(tmp, output);
    const mib = (b: number) => (b / 2 ** 20).toFixed(2);
    const quantized = report.choices.filter((c) => c.to !== c.from).length;
    const fallbacks = report.choices.filter((c) => c.note).length;
    console.log(`quantized ${input} (${mib(report.bytesIn)} MiB of tensors) to ${output} (${mib(report.bytesOut)} MiB) as ${report.ftype}: ` +
      `${quantized} of ${report.choices.length} tensors converted, ${fallbacks} fallbacks`);
    return 0;
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  } finally {
    close();
  }
}
