// `poot quantize IN OUT --type q8_0|q4_0|q4_k_m|q5_k_m|q6_k [--allow-requantize]`: llama-quantize's file types
// with its per-tensor choices (llm/formats/quantize.ts). IN is a GGUF file. The output is written to a
// temporary file beside OUT and renamed into place at the end, so a failure leaves no half-written OUT.
// Prints one line per tensor (name, shape, from -> to, and any fallback) and a summary.
import process from "node:process";
import { parseArgs } from "node:util";
import { existsSync, realpathSync, renameSync, rmSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { z } from "zod";
import { openGGUF } from "../llm/formats/gguf.ts";
import { QUANT_FTYPES, QuantizeError, quantizeToGGUF } from "../llm/formats/quantize.ts";

export const QUANTIZE_USAGE = `usage: poot quantize IN OUT --type ${QUANT_FTYPES.join("|")} [--allow-requantize] [--quiet]
  IN is a GGUF file (f32/f16/bf16 tensors; quantized ones only with --allow-requantize).`;

/** A bad command line (main.ts prints it and exits 2). */
export class QuantizeUsageError extends Error {
  readonly usage = true;
}

const Options = z.object({
  type: z.string({ error: "--type is required" }).transform((s) => s.toLowerCase()).pipe(
    z.enum(QUANT_FTYPES, { error: (i) => `--type: "${String(i.input)}" is not one of ${QUANT_FTYPES.join(", ")}` }),
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
  if (existsSync(input) && statSync(input).isDirectory()) {
    throw new QuantizeError(`${input} is a folder: poot quantize reads GGUF files (Hugging Face folders are not supported yet)`);
  }
  const outDir = dirname(output);
  if (!existsSync(outDir) || !statSync(outDir).isDirectory()) throw new QuantizeError(`cannot write ${output}: ${outDir} is not a folder`);
  if (existsSync(output) && existsSync(input) && realpathSync(output) === realpathSync(input)) {
    throw new QuantizeUsageError("quantize: OUT is the same file as IN");
  }
  const file = openGGUF(input);
  const tmp = `${output}.tmp-${process.pid}`;
  const quiet = opts.data.quiet === true;
  try {
    const report = quantizeToGGUF(file, file.metadata, tmp, opts.data.type, {
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
  }
}
