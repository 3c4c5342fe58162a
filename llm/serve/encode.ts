// `poot serve` for an encoder model: POST /v1/embeddings (OpenAI's shape: input string or list, data[] of
// {object, index, embedding}, usage) and POST /v1/rerank (llama.cpp's and Jina's shape: query, documents,
// top_n -> results [{index, relevance_score}] best first; /rerank and /v1/reranking are aliases), plus
// /health and /v1/models. The generation routes answer 400 naming the model kind. Requests run one at a time
// through the Driver's queue (each is batched internally); more than `maxQueue` waiting is a 429.
import type { Executor } from "../../backends/executor.ts";
import { Driver } from "../driver.ts";
import { ContextOverflowError, InvalidArgumentError, LlmError } from "../errors.ts";
import type { ModelHandle } from "../model.ts";
import { ENCODER_ROUTES, errorResponse, json, readBody, sameSecret } from "./http.ts";
import { frameInput } from "../encoder.ts";
import { EmbeddingsRequest, parseRequest, RequestError, RerankRequest, servedName, servedNames } from "./schema.ts";

export interface EncoderServeOptions {
  apiKey?: string;
  /** Largest request body in bytes (default 4 MiB). */
  bodyLimit?: number;
  bodyTimeoutMs?: number;
  /** Requests waiting before a 429 (default 64). */
  maxQueue?: number;
  modelId?: string;
  /** More names requests may give the model; a response names the one asked. */
  aliases?: string[];
  /** Batch and sequence buckets compiled at open. */
  batches?: number[];
  seqs?: number[];
}

export class EncoderServer {
  #waiting = 0;
  #accepting = true;
  readonly handler: (req: Request) => Promise<Response>;

  private constructor(readonly driver: Driver, readonly model: ModelHandle, readonly modelId: string, readonly ctx: number, o: EncoderServeOptions) {
    this.handler = this.#handler(o);
  }

  /** Loads the weights and compiles every bucket; on failure nothing stays on the device. */
  static async open(model: ModelHandle, exec: Executor, o: EncoderServeOptions = {}): Promise<EncoderServer> {
    const driver = await Driver.open(model, exec, { encoder: { batches: o.batches, seqs: o.seqs } });
    const modelId = o.modelId ?? model.name ?? model.path.split(/[\\/]/).pop()!;
    return new EncoderServer(driver, model, modelId, model.encoder!.maxTokens, o);
  }

  /** Stops admitting, lets queued requests finish within `graceMs`, then frees the device. */
  async shutdown(graceMs = 10_000): Promise<void> {
    this.#accepting = false;
    const until = performance.now() + graceMs;
    while (this.#waiting > 0 && performance.now() < until) await new Promise((r) => setTimeout(r, 20));
    await this.driver.close();
  }

  async #run<T>(job: () => Promise<T>, maxQueue: number): Promise<T> {
    if (!this.#accepting) throw new RequestError(503, "the server is shutting down", null, "shutting_down");
    if (this.#waiting >= maxQueue) throw new RequestError(429, `${this.#waiting} requests are waiting; try again later`, null, "queue_full");
    this.#waiting++;
    try {
      return await job();
    } catch (e) {
      if (e instanceof ContextOverflowError) throw new RequestError(400, e.message, "input", "context_length_exceeded");
      if (e instanceof InvalidArgumentError) throw new RequestError(400, e.message, e.argument, "invalid_value");
      throw e;
    } finally {
      this.#waiting--;
    }
  }

  #handler(o: EncoderServeOptions): (req: Request) => Promise<Response> {
    const limit = o.bodyLimit ?? 4 * 2 ** 20, timeout = o.bodyTimeoutMs ?? 30_000, maxQueue = o.maxQueue ?? 64;
    const ids = servedNames(this.modelId, o.aliases);
    const route = async (req: Request): Promise<Response> => {
      const path = new URL(req.url).pathname.replace(/\/+$/, "") || "/";
      const known: Record<string, string> = { "/health": "GET", "/v1/models": "GET", "/v1/chat/completions": "POST", "/v1/completions": "POST", ...ENCODER_ROUTES };
      const method = known[path];
      if (!method) throw new RequestError(404, `no route ${req.method} ${path}`, null, "not_found");
      if (req.method !== method) throw new RequestError(405, `${path} takes ${method}, not ${req.method}`, null, "method_not_allowed");
      if (path === "/health") return this.#accepting ? json(200, { status: "ok" }) : json(503, { status: "shutting down" });
      if (o.apiKey !== undefined && !sameSecret(req.headers.get("authorization") ?? "", `Bearer ${o.apiKey}`)) {
        throw new RequestError(401, "missing or wrong API key (Authorization: Bearer <key>)", null, "invalid_api_key");
      }
      if (path === "/v1/models") {
        return json(200, { object: "list", data: ids.map((id) => ({ id, object: "model", created: 0, owned_by: "poot", max_model_len: this.ctx })) });
      }
      if (path === "/v1/chat/completions" || path === "/v1/completions") {
        throw new RequestError(400, `${this.modelId} is an encoder: it serves /v1/embeddings and /v1/rerank, not ${path}`, "model", "model_kind");
      }
      if (path === "/v1/embeddings") {
        const r = parseRequest(EmbeddingsRequest, await readBody(req, limit, timeout));
        const model = servedName(ids, r.model);
        if (r.dimensions != null && r.dimensions !== this.model.config.dim) {
          throw new RequestError(400, `'dimensions' ${r.dimensions}: this model embeds in ${this.model.config.dim} (no Matryoshka truncation)`, "dimensions", "invalid_value");
        }
        const texts = typeof r.input === "string" ? [r.input] : r.input;
        const vecs = await this.#run(() => this.driver.embed(texts, { pooling: r.pooling ?? undefined, normalize: r.normalize ?? undefined, truncate: r.truncate ?? undefined }), maxQueue);
        const tokens = texts.reduce((n, t) => n + frameInput(this.model, "input", this.ctx, t, undefined, true).ids.length, 0);
        return json(200, {
          object: "list",
          model,
          data: vecs.map((v, index) => ({
            object: "embedding", index,
            embedding: r.encoding_format === "base64" ? base64(v) : Array.from(v),
          })),
          usage: { prompt_tokens: tokens, total_tokens: tokens },
        });
      }
      // The rerank routes.
      const r = parseRequest(RerankRequest, await readBody(req, limit, timeout));
      const model = servedName(ids, r.model);
      const docs = r.documents.map((d) => (typeof d === "string" ? d : d.text));
      const scores = await this.#run(() => this.driver.rerank(r.query, docs), maxQueue).catch((e) => {
        if (e instanceof LlmError && e.name === "ModelKindError") throw new RequestError(400, e.message, "model", "model_kind");
        throw e;
      });
      const order = scores.map((_, i) => i).sort((a, b) => scores[b] - scores[a]).slice(0, r.top_n ?? scores.length);
      const tokens = docs.reduce((n, d) => n + frameInput(this.model, "documents", this.ctx, r.query, d, true).ids.length, 0);
      return json(200, {
        model,
        object: "list",
        results: order.map((index) => ({
          index, relevance_score: scores[index], ...(r.return_documents ? { document: { text: docs[index] } } : {}),
        })),
        usage: { prompt_tokens: tokens, total_tokens: tokens },
      });
    };
    return async (req) => {
      try {
        return await route(req);
      } catch (e) {
        if (e instanceof RequestError) return errorResponse(e);
        return errorResponse(new RequestError(500, `internal error: ${(e as Error).name}: ${(e as Error).message}`, null, "internal_error"));
      }
    };
  }
}

/** OpenAI's base64 encoding: the little-endian f32 bytes. */
function base64(v: Float32Array): string {
  const b = new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  let s = "";
  for (let i = 0; i < b.length; i++) s += String.fromCharCode(b[i]);
  return btoa(s);
}
