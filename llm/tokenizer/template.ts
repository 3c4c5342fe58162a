// The post-processor of a tokenizer.json: how an encoder's input is framed around the bare pieces, for one text
// or a pair (a reranker's query and document), with the token type of each id. TemplateProcessing (BERT's
// "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B:1 [SEP]:1", Qwen3-Embedding's "$A <|endoftext|>"), BertProcessing and
// RobertaProcessing are read; no post-processor frames nothing.
// Truncation to a length budget is longest-first over the texts, as the tokenizers library's default.
import { TokenizerError } from "../errors.ts";

/** One element of a template: a sequence (A or B) or a fixed token, with its token type. */
type Piece = { seq: "A" | "B"; type: number } | { id: number; type: number };

/** The framing of one text and of a pair. */
export interface InputTemplate {
  single: Piece[];
  pair: Piece[];
}

/** An encoder's input: token ids and their token types (token_type_ids). */
export interface FramedInput {
  ids: number[];
  types: number[];
}

// deno-lint-ignore no-explicit-any
type Json = any;

function tokenId(tj: Json, name: string, where: string): number {
  const sp = tj.post_processor?.special_tokens?.[name]?.ids?.[0];
  const added = (tj.added_tokens ?? []).find((a: Json) => a.content === name)?.id;
  const id = sp ?? added ?? tj.model?.vocab?.[name];
  if (typeof id !== "number") throw new TokenizerError(`tokenizer.json: ${where} names token '${name}', which is not in the vocabulary`);
  return id;
}

function pieces(tj: Json, list: Json[], where: string): Piece[] {
  return list.map((p: Json) => {
    if (p.Sequence) return { seq: p.Sequence.id === "B" ? "B" : "A", type: p.Sequence.type_id ?? 0 };
    if (p.SpecialToken) return { id: tokenId(tj, p.SpecialToken.id, where), type: p.SpecialToken.type_id ?? 0 };
    throw new TokenizerError(`tokenizer.json: ${where} has an element that is neither Sequence nor SpecialToken`);
  });
}

/** The template of a parsed tokenizer.json (no post-processor: the bare pieces, type 0). */
export function templateFromHF(tj: Json): InputTemplate {
  const list = (n: Json): Json[] => (n == null ? [] : n.type === "Sequence" ? n.processors : [n]);
  for (const pp of list(tj.post_processor)) {
    if (pp.type === "TemplateProcessing") {
      return { single: pieces(tj, pp.single, "post_processor.single"), pair: pieces(tj, pp.pair, "post_processor.pair") };
    }
    if (pp.type === "BertProcessing" || pp.type === "RobertaProcessing") {
      const cls = pp.cls[1] as number, sep = pp.sep[1] as number;
      const roberta = pp.type === "RobertaProcessing";
      const A: Piece = { seq: "A", type: 0 }, B: Piece = { seq: "B", type: roberta ? 0 : 1 };
      const s = (t: number): Piece => ({ id: sep, type: t });
      return {
        single: [{ id: cls, type: 0 }, A, s(0)],
        pair: roberta ? [{ id: cls, type: 0 }, A, s(0), s(0), B, s(0)] : [{ id: cls, type: 0 }, A, s(0), B, s(1)],
      };
    }
  }
  return { single: [{ seq: "A", type: 0 }], pair: [{ seq: "A", type: 0 }, { seq: "B", type: 1 }] };
}

/** Frames `a` (and `b`) by the template, first cutting the longer text until the whole fits `max` ids. */
export function frame(t: InputTemplate, a: number[], b?: number[], max = Infinity): FramedInput {
  const tpl = b === undefined ? t.single : t.pair;
  const fixed = tpl.filter((p) => "id" in p).length;
  let A = a, B = b ?? [];
  const budget = max - fixed;
  if (budget < 1 + (b === undefined ? 0 : 1)) throw new TokenizerError(`a length limit of ${max} leaves no room for the text`);
  if (A.length + B.length > budget) {
    let na = A.length, nb = B.length;
    while (na + nb > budget) {
      if (na > nb) na--;
      else nb--;
    }
    A = A.slice(0, na);
    B = B.slice(0, nb);
  }
  const ids: number[] = [], types: number[] = [];
  for (const p of tpl) {
    if ("id" in p) {
      ids.push(p.id);
      types.push(p.type);
    } else {
      const s = p.seq === "A" ? A : B;
      ids.push(...s);
      for (let i = 0; i < s.length; i++) types.push(p.type);
    }
  }
  return { ids, types };
}
