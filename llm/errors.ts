// Typed errors of the LLM layer. Each message is one line that names what was wrong (a file, a field, a tensor,
// an offset), so the command line can print it as is without a stack trace.
//
// Strings that come from a model file or an argument (keys, tensor names, an architecture, a path) may hold
// anything: `shown` escapes control characters and caps the length where such a string enters a message, and
// every LlmError escapes its whole message once more, so no file can split the one error line or send a
// terminal escape sequence (ESC[2J) to the user's terminal.

/** Longest piece of an untrusted string `shown` keeps (in UTF-16 units). */
export const SHOWN_MAX = 120;

// C0 controls, DEL, C1 controls, and the Unicode line/paragraph separators and bidi overrides that reorder
// or break a terminal line.
// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** `s` with control characters written as escapes (`\n`, `\x1b`, `\u2028`). */
export function escapeControls(s: string): string {
  return s.replace(CONTROL, (c) => {
    if (c === "\n") return "\\n";
    if (c === "\r") return "\\r";
    if (c === "\t") return "\\t";
    const n = c.charCodeAt(0);
    return n < 0x100 ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u${n.toString(16).padStart(4, "0")}`;
  });
}

/** An untrusted string as it may appear in an error message: escaped, and cut to `max` units with a count. */
export function shown(s: string, max = SHOWN_MAX): string {
  const cut = s.length > max ? `${s.slice(0, max)}... (${s.length - max} more)` : s;
  return escapeControls(cut);
}
import type { GenerateResult } from "./driver.ts";

/** Base class of every error the LLM layer throws on bad input. */
export class LlmError extends Error {
  /** Builds the error and its one-line message. */
  constructor(message: string, options?: { cause?: unknown }) {
    super(escapeControls(message), options);
    this.name = new.target.name;
  }
}

/** A model file that does not exist or cannot be read. */
export class ModelNotFoundError extends LlmError {
  /** The file path. */
  readonly path: string;
  /** Builds the error and its one-line message. */
  constructor(path: string, reason: string, options?: { cause?: unknown }) {
    super(`${shown(path, 400)}: cannot read model file: ${reason}`, options);
    this.path = path;
  }
}

/** Where in a model file a problem was found. */
export interface FormatLocation {
  /** File path, or a label such as "<bytes>" for in-memory input. */
  file: string;
  /** The field being read: "header.magic", "metadata[3] 'general.alignment' value", "tensor 'blk.0.attn_q.weight' dims". */
  field: string;
  /** Byte offset in the file where the field starts (or where reading failed). */
  offset: number;
}

/** A truncated or corrupt model file. */
export class ModelFormatError extends LlmError implements FormatLocation {
  /** The file. */
  readonly file: string;
  /** The field. */
  readonly field: string;
  /** The byte offset. */
  readonly offset: number;
  /** Builds the error and its one-line message. */
  constructor(loc: FormatLocation, problem: string) {
    super(`${shown(loc.file, 400)}: ${loc.field} at offset ${loc.offset}: ${problem}`);
    this.file = loc.file;
    this.field = loc.field;
    this.offset = loc.offset;
  }
}

/** A well-formed model file that uses something this runtime does not support (version, tensor type, ...). */
export class UnsupportedFormatError extends ModelFormatError {}

/** A tensor whose ggml type id is unknown or not supported. */
export class UnsupportedTensorTypeError extends UnsupportedFormatError {
  /** The tensor name. */
  readonly tensor: string;
  /** The ggml type id. */
  readonly typeId: number;
  /** Builds the error and its one-line message. */
  constructor(loc: FormatLocation, tensor: string, typeId: number, typeName?: string) {
    super(
      loc,
      `tensor '${shown(tensor)}' has ${typeName ? `ggml type ${typeName} (id ${typeId}), which is not supported` : `unknown ggml type id ${typeId}`}`,
    );
    this.tensor = tensor;
    this.typeId = typeId;
  }
}

/** A metadata key that is missing or holds a value of the wrong type. */
export class MetadataError extends LlmError {
  /** The metadata key. */
  readonly key: string;
  /** Builds the error and its one-line message. */
  constructor(file: string, key: string, problem: string) {
    super(`${shown(file, 400)}: metadata '${shown(key)}': ${problem}`);
    this.key = key;
  }
}

/** A tokenizer description (GGUF metadata or tokenizer.json) that cannot be used, or a token id out of range. */
export class TokenizerError extends LlmError {}

/** An architecture name (general.architecture) that no model family handles. */
export class UnknownArchitectureError extends LlmError {
  /** The architecture name. */
  readonly architecture: string;
  /** Builds the error and its one-line message. */
  constructor(architecture: string, known: readonly string[] = []) {
    super(
      `unknown architecture '${shown(architecture)}'` + (known.length ? ` (supported: ${known.join(", ")})` : ""),
    );
    this.architecture = architecture;
  }
}

/** A prompt (or prompt plus requested tokens) longer than the context the model was loaded with. */
export class ContextOverflowError extends LlmError {
  /** Tokens given. */
  readonly tokens: number;
  /** The context size. */
  readonly context: number;
  /** Builds the error and its one-line message. */
  constructor(tokens: number, context: number, what = "prompt") {
    super(`${what} has ${tokens} tokens, more than the context of ${context}`);
    this.tokens = tokens;
    this.context = context;
  }
}

/** Metadata arrays nested deeper than the reader allows (a real file nests one level at most). */
export class NestingLimitError extends ModelFormatError {
  /** The deepest nesting allowed. */
  readonly depth: number;
  /** Builds the error and its one-line message. */
  constructor(loc: FormatLocation, depth: number) {
    super(loc, `arrays nested more than ${depth} deep`);
    this.depth = depth;
  }
}

/** A tensor that is missing, or whose shape or dtype differs from what the model's config implies. */
export class TensorMismatchError extends LlmError {
  /** The model file (or config.json of a folder). */
  readonly file: string;
  /** The tensor's name in the file. */
  readonly tensor: string;
  /** Builds the error and its one-line message. */
  constructor(file: string, tensor: string, problem: string) {
    super(`${shown(file, 400)}: tensor '${shown(tensor)}': ${problem}`);
    this.file = file;
    this.tensor = tensor;
  }
}

/** A context length the model was not trained for or the device cannot hold; says how to override when one can. */
export class ContextLengthError extends LlmError {
  /** The context asked for, in positions. */
  readonly context: number;
  /** Builds the error and its one-line message. */
  constructor(context: number, problem: string) {
    super(`context of ${context} positions: ${problem}`);
    this.context = context;
  }
}

/** A JSON file of a Hugging Face model folder (config.json, tokenizer_config.json, the shard index) with a bad field. */
export class ConfigError extends LlmError {
  /** The JSON file. */
  readonly file: string;
  /** The field's path ("" for the top level). */
  readonly field: string;
  /** Builds the error and its one-line message. */
  constructor(file: string, field: string, problem: string) {
    super(`${file}: ${field ? `field '${field}'` : "top level"}: ${problem}`);
    this.file = file;
    this.field = field;
  }
}

/** A chat template that is missing or fails to render for the given messages. */
export class ChatTemplateError extends LlmError {}
/** A library call given an argument it cannot use (wrong type, out of range); `argument` names it. */
export class InvalidArgumentError extends LlmError {
  /** The argument that was wrong. */
  readonly argument: string;
  /** Builds the error and its one-line message. */
  constructor(argument: string, problem: string) {
    super(`${argument}: ${problem}`);
    this.argument = argument;
  }
}

/**
 * A generation stopped by its AbortSignal (or by leaving a `for await` loop over its stream). `name` is
 * "AbortError", as fetch and node-llama-cpp use; `partial` holds what was generated before the abort
 * (absent when the call was aborted while still queued).
 */
export class AbortError extends LlmError {
  /** What was generated before the abort. */
  readonly partial?: GenerateResult;
  /** Builds the error and its one-line message. */
  constructor(message: string, partial?: GenerateResult) {
    super(message);
    this.name = "AbortError";
    this.partial = partial;
  }
}

/** A call on a Driver after `close()`. */
export class DriverClosedError extends LlmError {
  /** Builds the error and its one-line message. */
  constructor() {
    super("the driver is closed");
  }
}

/**
 * A call the model's kind cannot serve: generating or chatting with an encoder-only model (BERT), or embedding
 * or reranking with a model that has no encoder step or no classifier head.
 */
export class ModelKindError extends LlmError {
  /** Builds the error and its one-line message. */
  constructor(model: string, problem: string) {
    super(`${model}: ${problem}`);
  }
}

/** An image that cannot be read: a format that is not PNG or JPEG, a truncated or malformed file, too many pixels. */
export class ImageError extends LlmError {
  /** Builds the error and its one-line message (`what` names the image: a file, an argument, a message part). */
  constructor(what: string, problem: string) {
    super(`${shown(what)}: ${problem}`);
  }
}
