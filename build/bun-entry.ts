// Entry point of the bun-compiled single binary (dist/poot): embeds the default model in the binary, then runs
// the CLI. Only `bun build --compile` reads this file.
// @ts-ignore: a Bun file import (the path of the embedded file inside the binary)
import model from "../models/stories260K/stories260K.gguf" with { type: "file" };

(globalThis as { POOT_DEFAULT_MODEL?: string }).POOT_DEFAULT_MODEL = model;
const { main } = await import("../cli/main.ts");
process.exit(await main(process.argv.slice(2)));
