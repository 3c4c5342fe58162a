// Server metrics as Prometheus text (exposition format 0.0.4): counters, gauges read at scrape time, and
// cumulative histograms of time to first token and inter-token latency.

const TTFT_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
const ITL_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

export class Histogram {
  readonly counts: number[];
  sum = 0;
  count = 0;
  constructor(readonly buckets: readonly number[]) {
    this.counts = new Array(buckets.length).fill(0);
  }
  observe(seconds: number): void {
    this.sum += seconds;
    this.count++;
    for (let i = 0; i < this.buckets.length; i++) if (seconds <= this.buckets[i]) this.counts[i]++;
  }
  render(name: string, help: string): string {
    const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} histogram`];
    this.buckets.forEach((b, i) => lines.push(`${name}_bucket{le="${b}"} ${this.counts[i]}`));
    lines.push(`${name}_bucket{le="+Inf"} ${this.count}`, `${name}_sum ${this.sum}`, `${name}_count ${this.count}`);
    return lines.join("\n");
  }
}

/** Values read when /metrics is scraped. */
export interface Gauges {
  queue: number;
  running: number;
  kvUsed: number;
  kvFree: number;
}

export class Metrics {
  /** Finished HTTP requests by status code. */
  readonly requests = new Map<number, number>();
  promptTokens = 0;
  generatedTokens = 0;
  preemptions = 0;
  /** KV blocks a sequence took from the prefix cache instead of computing. */
  prefixHits = 0;
  steps = 0;
  readonly ttft = new Histogram(TTFT_BUCKETS);
  readonly itl = new Histogram(ITL_BUCKETS);

  request(status: number): void {
    this.requests.set(status, (this.requests.get(status) ?? 0) + 1);
  }

  render(g: Gauges): string {
    const out: string[] = [];
    const metric = (name: string, type: "counter" | "gauge", help: string, value: number) =>
      out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, `${name} ${value}`);
    out.push("# HELP poot_requests_total HTTP requests answered, by status code", "# TYPE poot_requests_total counter");
    for (const [code, n] of [...this.requests].sort((a, b) => a[0] - b[0])) out.push(`poot_requests_total{status="${code}"} ${n}`);
    metric("poot_prompt_tokens_total", "counter", "Prompt tokens admitted", this.promptTokens);
    metric("poot_generation_tokens_total", "counter", "Tokens generated", this.generatedTokens);
    metric("poot_preemptions_total", "counter", "Sequences preempted for KV blocks (recomputed later)", this.preemptions);
    metric("poot_prefix_cache_hit_blocks_total", "counter", "KV blocks reused from the prefix cache", this.prefixHits);
    metric("poot_steps_total", "counter", "Batched steps replayed", this.steps);
    metric("poot_queue_depth", "gauge", "Requests waiting for a slot", g.queue);
    metric("poot_running_sequences", "gauge", "Sequences in the running batch", g.running);
    metric("poot_kv_blocks_used", "gauge", "KV pool blocks held by sequences", g.kvUsed);
    metric("poot_kv_blocks_free", "gauge", "KV pool blocks free", g.kvFree);
    out.push(this.ttft.render("poot_time_to_first_token_seconds", "Time from arrival to the first generated token"));
    out.push(this.itl.render("poot_inter_token_latency_seconds", "Time between consecutive generated tokens of a sequence"));
    return out.join("\n") + "\n";
  }
}
