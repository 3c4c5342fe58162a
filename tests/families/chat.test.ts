// Chat templates and the interactive session: OpenAI-style content parts and null content render like plain
// strings, add_generation_prompt is honoured, a model without a template is a typed error; `poot chat`'s
// session keeps the history across turns, an interrupt stops the current reply (keeping what was generated)
// and not the session, and an interrupt at the prompt ends it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadModel } from "../../llm/model.ts";
import { type ChatMessage, renderChat } from "../../llm/chat.ts";
import { ChatTemplateError } from "../../llm/errors.ts";
import { type ChatIO, chatSession } from "../../cli/chat.ts";
import type { Driver } from "../../llm/driver.ts";
import { FIXTURES } from "./fixtures.ts";

const qwen = loadModel(`${FIXTURES}qwen2`);

test("renderChat: text parts and null content read as strings; add_generation_prompt", () => {
  const plain = renderChat(qwen, [{ role: "user", content: "Hi there" }, { role: "assistant", content: "" }]);
  const parts = renderChat(qwen, [{ role: "user", content: [{ type: "text", text: "Hi " }, { type: "text", text: "there" }] }, { role: "assistant", content: null }]);
  assert.equal(parts, plain);
  assert.ok(plain.endsWith("<|im_start|>assistant\n"));
  const closed = renderChat(qwen, [{ role: "user", content: "Hi" }], { addGenerationPrompt: false });
  assert.ok(closed.endsWith("<|im_end|>\n") && !closed.includes("<|im_start|>assistant"));
  assert.ok(closed.startsWith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>"), "the template's default system turn");
});

test("renderChat: a model without a template is a ChatTemplateError naming the model", () => {
  const bare = { ...qwen, chatTemplate: undefined };
  assert.throws(() => renderChat(bare, [{ role: "user", content: "x" }]), (e: unknown) => e instanceof ChatTemplateError && /has no chat template/.test((e as Error).message));
});

test("the tokenizer ends generation at each template's end-of-turn token", () => {
  for (const [f, eot] of [["llama", "<|eot_id|>"], ["qwen2", "<|im_end|>"], ["gemma2", "<end_of_turn>"], ["phi3", "<|end|>"], ["mistral", "</s>"]]) {
    const m = loadModel(`${FIXTURES}${f}`);
    assert.ok(m.tokenizer.isEog(m.tokenizer.tokenId(eot)!), `${f}: ${eot}`);
    m.close();
  }
});

/** A driver stand-in whose replies never end by themselves: "a", "b", ... one per event-loop turn. */
function endlessDriver(seen: ChatMessage[][]): Driver {
  return {
    model: { chatTemplate: undefined },
    chatStream(messages: ChatMessage[]) {
      seen.push(structuredClone(messages));
      return (async function* () {
        for (let i = 0; ; i++) {
          await new Promise((ok) => setTimeout(ok, 1));
          yield { id: i, text: String.fromCharCode(97 + (i % 26)) };
        }
      })();
    },
  } as unknown as Driver;
}

test("chat session: an interrupt stops the reply, not the session; the history carries both turns", async () => {
  const seen: ChatMessage[][] = [];
  let interrupt = () => {};
  let out = "";
  async function* lines() {
    yield "first question";
    yield "second question";
    yield "/exit";
  }
  const io: ChatIO = {
    write: (s) => {
      out += s;
      // Stop each reply after its 5th letter.
      if (/[a-z]{5}$/.test(out)) interrupt();
    },
    lines: lines(),
    onInterrupt(f) {
      interrupt = f;
      return () => {};
    },
  };
  await chatSession(endlessDriver(seen), io, { system: "be brief" });
  assert.equal(seen.length, 2);
  assert.deepEqual(seen[1].map((m) => m.role), ["system", "user", "assistant", "user"]);
  assert.match(seen[1][2].content as string, /^abcde/);
  assert.match(out, /^> abcde.* \[stopped\]\n> abcde.* \[stopped\]\n> $/s);
});

test("chat session: a thinking model's reply goes back to the template as reasoning_content and content", async () => {
  const seen: ChatMessage[][] = [];
  const driver = {
    model: { chatTemplate: "{{ '<think>' }}{{ '</think>' }}" },
    // the template opened the block: the reply starts inside it
    chatPrompt: () => "<|assistant|>\n<think>\n",
    chatStream(messages: ChatMessage[]) {
      seen.push(structuredClone(messages));
      return (async function* () {
        for (const text of ["Adding", " up.\n</th", "ink>\n\n", "It is 4."]) yield { id: 0, text };
      })();
    },
  } as unknown as Driver;
  let out = "";
  async function* lines() {
    yield "2+2?";
    yield "And 3+3?";
  }
  await chatSession(driver, { write: (s) => (out += s), lines: lines(), onInterrupt: () => () => {} }, {});
  assert.deepEqual(seen[1][1], { role: "assistant", content: "It is 4.", reasoning_content: "Adding up." });
  assert.match(out, /^> Adding up\.\n<\/think>\n\nIt is 4\.\n> /, "printed as written");
});

test("generation_config.json's eos_token_id list joins the end-of-generation set (as transformers' generate stops there)", () => {
  const dir = mkdtempSync(join(tmpdir(), "poot-gen-"));
  try {
    for (const f of readdirSync(`${FIXTURES}phi3`)) copyFileSync(`${FIXTURES}phi3/${f}`, join(dir, f));
    const before = loadModel(dir);
    const assistant = before.tokenizer.tokenId("<|assistant|>")!;
    assert.equal(before.tokenizer.isEog(assistant), false);
    before.close();
    writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: [before.tokenizer.eos, assistant] }));
    const m = loadModel(dir);
    assert.ok(m.tokenizer.isEog(assistant) && m.tokenizer.isEog(m.tokenizer.tokenId("<|end|>")!));
    m.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
