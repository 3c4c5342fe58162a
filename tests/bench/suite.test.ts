// bench/driver.ts on the JS device (time to first token through the Driver's chunks, decode through generate)
// and bench/suite.ts's table: rows with and without a baseline, a failed row keeps its name and says why.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tmpdir } from "node:os";
import { runDriverBench, SAMPLED } from "../../bench/driver.ts";
import { formatSuite, jobs, readAgainstAnchors, runJob, suiteHead, type SuiteRow } from "../../bench/suite.ts";

test("runDriverBench on the JS device: time to first token per prompt length and Driver decode, finite and positive", { timeout: 120_000 }, async () => {
  const lines: string[] = [];
  const r = await runDriverBench({ shape: "stories260K", backend: "js", prompts: [9, 40], tokens: 4, reps: 1, log: (l) => lines.push(l) });
  assert.equal(r.backend, "js");
  assert.equal(r.ctx, 512, "the smallest power of two >= 512 above the longest prompt and the tokens");
  assert.deepEqual(Object.keys(r.ttftMs).sort(), ["40", "9"]);
  for (const ms of Object.values(r.ttftMs)) assert.ok(Number.isFinite(ms) && ms > 0);
  assert.ok(r.decode, "decode measured");
  assert.equal(r.decode.tokens, 4);
  for (const k of ["tokPerSec", "msPerToken", "hostMicros"] as const) assert.ok(Number.isFinite(r.decode[k]) && r.decode[k] > 0, `${k} = ${r.decode[k]}`);
  assert.ok(r.decode.waitMicros >= 0 && r.decode.hostMicros <= r.decode.msPerToken * 1000 + 1e-6);
  assert.ok(lines.some((l) => l.includes("time to first token of a 40-token prompt")));
  await assert.rejects(runDriverBench({ shape: "nope", backend: "js", prompts: [4], tokens: 0 }), RangeError);
  await assert.rejects(runDriverBench({ shape: "stories260K", backend: "js", prompts: [600], tokens: 0, ctx: 512 }), /do not fit ctx 512/);
});

test("runDriverBench with a sampler: the timed decode samples, named in the result and the log", { timeout: 120_000 }, async () => {
  const lines: string[] = [];
  const r = await runDriverBench({ shape: "stories260K", backend: "js", prompts: [], tokens: 6, sampler: SAMPLED, log: (l) => lines.push(l) });
  assert.deepEqual(r.sampler, SAMPLED);
  assert.equal(r.decode?.tokens, 6);
  assert.ok(lines.some((l) => l.includes("Driver decode (sampled)")), lines.join("\n"));
});

test("formatSuite: one Markdown row per measurement, an old column from a baseline, failures named", () => {
  const rows: SuiteRow[] = [
    { group: "decode", name: "a ptx bf16, cap 2048", value: 1234.5, unit: "tok/s", against: "roofline 1700 tok/s", fraction: 0.726, goal: ">= 1380", seconds: 3 },
    { group: "deep", name: "a deep", value: 1.084, unit: "x per token", goal: "<= 1.10x", seconds: 2 },
    { group: "bun", name: "a under Bun", unit: "", note: "skipped: bun is not on PATH", seconds: 0 },
  ];
  const t = formatSuite(rows).split("\n");
  assert.equal(t.length, 2 + rows.length);
  assert.match(t[0], /^\| row \| poot \| roofline \/ reference \| of roofline \| goal \| notes \|$/);
  assert.match(t[2], /\| a ptx bf16, cap 2048 \| 1235 tok\/s \| roofline 1700 tok\/s \| 72\.6% \| >= 1380 \|/);
  assert.match(t[3], /\| 1\.08x \|/);
  assert.match(t[4], /\| a under Bun \| - \|.*skipped: bun is not on PATH/);
  const old: SuiteRow[] = [{ ...rows[0], value: 1168 }, { ...rows[1], value: 1.4 }];
  const b = formatSuite(rows, old).split("\n");
  assert.match(b[0], /^\| row \| old \| poot \|/);
  assert.match(b[2], /\| a ptx bf16, cap 2048 \| 1168 tok\/s \| 1235 tok\/s \|/);
  assert.match(b[3], /\| 1\.40x \| 1\.08x \|/);
  assert.match(b[4], /\| a under Bun \| - \| - \|/);
});

test("the suite's quantized and Vulkan/WebGPU rows: both issue-23 shapes, issue 16's goals on the 8B rows of the suite's backend, the other backends read against it", () => {
  const byGroup = (g: string) => jobs(new Set([g]), "ptx", []);
  const vk = byGroup("vulkan")[0];
  assert.deepEqual(vk.names, ["llama-3.2-1b vulkan", "qwen2.5-0.5b vulkan"]);
  assert.ok(vk.cmd.includes("llama-3.2-1b,qwen2.5-0.5b"), vk.cmd.join(" "));
  const replay = { tokPerSec: 500, rooflineMs: 1, rooflineFraction: 0.5, msPerToken: 2, hostMicros: 20 };
  const json = { rows: ["q4_k_m", "q8_0"].flatMap((dtype) => ["llama-3-8b", "llama-3.2-1b"].map((shape) => ({ shape, dtype, backend: "ptx", cap: 2048, replay }))) };
  const q = byGroup("quant")[0];
  assert.ok(q.cmd.join(" ").includes("--dtype q4_k_m,q8_0 --backend ptx"), q.cmd.join(" "));
  const rows = q.rows(json);
  assert.deepEqual(rows.map((r) => r.goal), [">= 60% of roofline", undefined, ">= 75% of roofline", undefined]);
  assert.ok(rows.every((r) => !/PyTorch/.test(r.note ?? "")), "no bf16 reference on quantized rows");
  const v = byGroup("vulkan-quant")[0];
  assert.ok(v.cmd.includes("vulkan"));
  assert.ok(v.rows({ rows: json.rows.map((r) => ({ ...r, backend: "vulkan" })) }).every((r) => r.goal === ">= 80% of the ptx row (issue 23)"));
  assert.deepEqual(byGroup("wgpu-quant")[0].names, ["llama-3.2-1b wgpu q4_k_m, q8_0"]);
});

test("the PyTorch anchors in the same run: their rows from the script's JSON file, the decode and prefill rows read against them; a missing anchor folder is a skip that says why", () => {
  const none = jobs(new Set(["pytorch", "pytorch-prefill"]), "ptx", [], "/nonexistent/anchors");
  assert.equal(none.length, 2);
  for (const j of none) {
    const rows = runJob(j, () => {});
    assert.ok(rows.length > 0 && rows.every((r) => r.value === undefined && /skipped: .*nonexistent\/anchors/.test(r.note ?? "")), JSON.stringify(rows));
  }
  // a stand-in anchor folder: scripts that write what gptfast_decode.py and torch_prefill.py write to $OUT
  const dir = mkdtempSync(join(tmpdir(), "poot-anchors-"));
  try {
    writeFileSync(join(dir, "gf_model.py"), "");
    const anchors = { copy_TBps: 4.3, "llama-3.2-1b/gptfast_compiled": 740, "llama-3.2-1b/gptfast_eager": 90, "qwen2.5-0.5b-like/gptfast_compiled": 850 };
    writeFileSync(join(dir, "gptfast_decode.py"), `import json, os\njson.dump(${JSON.stringify(anchors)}, open(os.path.join(os.environ["OUT"], "anchors.json"), "w"))\n`);
    writeFileSync(join(dir, "torch_prefill.py"), `import json, os\njson.dump({"llama-3-8b/prefill512_eager_ms": 50.0}, open(os.path.join(os.environ["OUT"], "prefill.json"), "w"))\n`);
    const [dec, pre] = jobs(new Set(["pytorch", "pytorch-prefill"]), "ptx", [], dir);
    if (dec.skip) {
      assert.match(dec.skip, /python3 is not on PATH/);
      return;
    }
    const torch = [...runJob(dec, () => {}), ...runJob(pre, () => {})];
    // a failed or skipped run's rows carry the names a measured run's have (so --from can put one over the other)
    assert.deepEqual(torch.map((r) => r.name), [...dec.names, ...pre.names]);
    const byName = (re: RegExp) => torch.find((r) => re.test(r.name));
    assert.equal(byName(/^llama-3.2-1b PyTorch compiled/)?.value, 740);
    assert.equal(byName(/^qwen2.5-0.5b PyTorch compiled/)?.value, 850);
    assert.equal(byName(/^llama-3-8b PyTorch eager .* 512-token/)?.value, 50);
    assert.equal(byName(/^llama-3-8b PyTorch eager .* 2048-token/)?.value, undefined, "a figure the script did not write stays empty");
    assert.equal(byName(/^llama-3-8b PyTorch compiled/)?.note, "not measured in this run");
    // poot's rows as the decode and prefill jobs make them
    const replay = { tokPerSec: 1480, rooflineMs: 0.5, rooflineFraction: 0.74, msPerToken: 0.676, hostMicros: 9 };
    const decode = jobs(new Set(["decode"]), "ptx", ["llama-3.2-1b"])[0].rows({ rows: [{ shape: "llama-3.2-1b", dtype: "bf16", backend: "ptx", cap: 2048, replay }] });
    const prefill = jobs(new Set(["prefill"]), "ptx", [])[1].rows({ backend: "ptx", ttftMs: { 512: 20, 2048: 60 } });
    const read = readAgainstAnchors([...decode, ...prefill, ...torch].map((r) => ({ group: "x", seconds: 1, ...r })));
    const d = read.find((r) => r.name.startsWith("llama-3.2-1b ptx bf16"))!;
    assert.match(d.against ?? "", /^roofline 2000 tok\/s; PyTorch compiled 740 tok\/s \(this run\)$/);
    assert.match(d.note ?? "", /^2\.00x PyTorch's tok\/s$/, "the issue's figure gives way to this run's");
    const p512 = read.find((r) => /^llama-3-8b ptx: .* 512-token/.test(r.name))!;
    assert.match(p512.against ?? "", /^PyTorch eager 50\.0 ms \(this run\)$/);
    assert.match(p512.note ?? "", /2\.50x as fast as PyTorch$/);
    const p2048 = read.find((r) => /^llama-3-8b ptx: .* 2048-token/.test(r.name))!;
    assert.match(p2048.against ?? "", /\(issue\)/, "no figure this run: the issue's stays");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("reading against the anchors twice changes nothing", () => {
  const rows: SuiteRow[] = [
    { group: "decode", name: "a", value: 300, unit: "tok/s", against: "roofline 400 tok/s", note: "PyTorch compiled 186 tok/s (issue)", versus: "compiled a", seconds: 1 },
    { group: "pytorch", name: "a torch", value: 150, unit: "tok/s", anchor: "compiled a", seconds: 1 },
  ];
  const once = readAgainstAnchors(rows);
  assert.equal(once[0].against, "roofline 400 tok/s; PyTorch compiled 150 tok/s (this run)");
  assert.equal(once[0].note, "2.00x PyTorch's tok/s");
  assert.deepEqual(readAgainstAnchors(once), once);
});

test("the table's first line names the cards, and says when the roofline's rate is the H200's on another card", () => {
  const at = new Date("2026-12-07T00:00:00Z");
  const row = (device: string | undefined, fraction?: number): SuiteRow => ({ group: "decode", name: "a", value: 1, unit: "tok/s", fraction, device, seconds: 1 });
  const torch: SuiteRow = { group: "pytorch", name: "a torch", value: 1, unit: "tok/s", ceiling: 3.05, seconds: 1 };
  assert.equal(suiteHead([row("NVIDIA H200", 0.7), torch], 12, at),
    "poot speed table (2026-12-07T00:00:00.000Z) on NVIDIA H200, roofline at 4.27 TB/s, batch 1, greedy; 12 s");
  const h100 = suiteHead([row("NVIDIA H100 80GB HBM3", 0.5), row("NVIDIA H100 80GB HBM3"), torch], 3, at);
  assert.match(h100, / on NVIDIA H100 80GB HBM3, roofline at 4\.27 TB\/s \(the H200's measured copy rate: the "of roofline" column on NVIDIA H100 80GB HBM3 is against it, not that card's; PyTorch's copy ceiling there 3\.05 TB\/s\), batch 1/);
  // rows without a fraction (time to first token, host µs) borrow nothing; two cards: no ceiling (a PyTorch row names none)
  assert.doesNotMatch(suiteHead([row("NVIDIA H100 80GB HBM3")], 1, at), /H200's/);
  const two = suiteHead([row("NVIDIA H200", 0.7), row("NVIDIA H100 80GB HBM3", 0.5), torch], 1, at);
  assert.match(two, / on NVIDIA H200, NVIDIA H100 80GB HBM3, .*column on NVIDIA H100 80GB HBM3 is against it, not that card's\), batch/);
  // runJob takes the card from the command's JSON
  const dir = mkdtempSync(join(tmpdir(), "poot-suite-card-"));
  try {
    const file = join(dir, "out.json");
    writeFileSync(file, JSON.stringify({ device: "NVIDIA H100 80GB HBM3", rows: [{ shape: "s", dtype: "bf16", backend: "ptx", cap: 64, replay: { tokPerSec: 9, rooflineMs: 1, rooflineFraction: 0.1, msPerToken: 1, hostMicros: 1 } }] }));
    const job = { ...jobs(new Set(["decode"]), "ptx", ["s"])[0], cmd: ["deno", "eval", `console.log(Deno.readTextFileSync(${JSON.stringify(file)}))`] };
    const rows = runJob(job, () => {});
    assert.equal(rows[0].device, "NVIDIA H100 80GB HBM3", JSON.stringify(rows));
    assert.equal(rows[0].value, 9);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
