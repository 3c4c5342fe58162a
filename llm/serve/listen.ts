// Serves a fetch handler on Deno.serve or Bun.serve, whichever runtime this is (the handler is the same).
export interface Listener {
  hostname: string;
  port: number;
  /** Stops accepting connections and closes them. */
  close(): Promise<void>;
}

export interface ListenOptions {
  hostname: string;
  /** 0 picks a free port. */
  port: number;
  /** The handler enforces its own body limit; the runtime's is set above it so the handler can answer 413. */
  bodyLimit?: number;
}

type DenoServe = (o: { hostname: string; port: number; onListen?: (a: { port: number }) => void }, h: (r: Request) => Promise<Response>) => {
  addr: { port: number };
  shutdown(): Promise<void>;
};
type BunServe = (o: { hostname: string; port: number; fetch: (r: Request) => Promise<Response>; idleTimeout?: number; maxRequestBodySize?: number }) => {
  port: number;
  stop(force?: boolean): Promise<void> | void;
};

export function listen(handler: (req: Request) => Promise<Response>, o: ListenOptions): Promise<Listener> {
  const g = globalThis as unknown as { Deno?: { serve: DenoServe }; Bun?: { serve: BunServe } };
  if (g.Deno) {
    // The handler reads request.signal to drop a non-streamed request whose client left. This package's deno.json
    // opts into Deno's newer behaviour (unstable "no-legacy-abort"): the signal fires only when the client leaves.
    // Under a config without it, it also fires after a successful response and Deno prints a warning once;
    // harmless here (the request is done then). info.completed is no substitute: it does not settle while the
    // handler is still computing.
    const s = g.Deno.serve({ hostname: o.hostname, port: o.port, onListen: () => {} }, handler);
    return Promise.resolve({ hostname: o.hostname, port: s.addr.port, close: () => s.shutdown() });
  }
  if (g.Bun) {
    // idleTimeout 0: a stream may be quiet for long (a queued request, a slow device); the server bounds it.
    const s = g.Bun.serve({
      hostname: o.hostname, port: o.port, fetch: handler, idleTimeout: 0, maxRequestBodySize: 2 * (o.bodyLimit ?? 4 * 2 ** 20),
    });
    return Promise.resolve({ hostname: o.hostname, port: s.port, close: async () => void await s.stop(true) });
  }
  return Promise.reject(new Error("serve needs Deno or Bun (Deno.serve / Bun.serve)"));
}
