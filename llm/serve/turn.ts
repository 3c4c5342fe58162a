// Turns of the event loop between scheduler steps, at the least cost that still lets sockets through.
//
// A step on a GPU spins on its fence (ptx, vulkan) and a JS-device step is plain CPU work: neither lets the
// runtime poll sockets, so the loop must give it turns between steps, or new requests, SSE writes and client
// disconnects wait. What lets I/O through differs (measured with a loopback fetch against busy steps):
// - Deno polls sockets only when its event loop parks (nothing ready) or every 61 ready tasks (tokio's event
//   interval): a due timer, setImmediate or a MessageChannel message never parks it, so only a timer that
//   still has time to run lets requests and disconnects in; a 0 ms timer waits 1-2.5 ms there (1 ms resolution;
//   armed in a timer callback's continuation, HTML's nesting rule makes it 4 ms).
// - Bun polls sockets on every timer turn, and its 0 ms timer costs ~1 ms when awaited after the step.
// A setTimeout(0) awaited after every step (the old loop) cost 1.2-3.7 ms a step, most of a 3 ms batch-32
// step on the H200. Here a step is followed by a cheap hop (a MessageChannel message, ~10-30 µs: promise
// continuations run, so token events reach the streams), and by a timer turn, which parks the loop and lets the
// runtime poll sockets, only once `everyMs` has passed since the last one: sockets wait at most `everyMs` plus
// one step. (A timer armed before the step and awaited after it, when already due, costs ~0.1 ms, but Deno does
// not poll on it, and under Bun a loopback fetch still took 20-30 ms against 3 ms steps: not used.)
// A step long enough parks instead inside its own wait (Executor StepOptions.park: a timer that ends ~3 ms before
// the device is expected to), so its sockets are polled while the device works and no turn follows it.
import { MessageChannel } from "node:worker_threads";

let channel: MessageChannel | undefined;
const waiting: (() => void)[] = [];

/** One macrotask hop (promise continuations and ready callbacks run; no socket poll in Deno or Bun). */
function hop(): Promise<void> {
  if (!channel) {
    // node:worker_threads' port, because it can be unref'd: a port with a listener keeps the process alive, so it
    // is ref'd only while a hop is pending (else the process could never exit; and an unref'd pending hop would
    // let Deno end a test with the loop's promise unresolved).
    channel = new MessageChannel();
    channel.port1.on("message", () => {
      waiting.shift()?.();
      if (waiting.length === 0) channel!.port1.unref();
    });
  }
  channel.port1.ref();
  return new Promise<void>((r) => {
    waiting.push(r);
    channel!.port2.postMessage(0);
  });
}

export class IoTurns {
  #last = performance.now();
  /** Timer turns taken (a parked step counts none). */
  turns = 0;

  /** `everyMs`: the longest the loop runs steps without letting the runtime poll sockets (default 5 ms). */
  constructor(readonly everyMs = 5) {}

  /**
   * Call between two steps. `parkedAt`: when the last step's wait last parked the loop on a timer (Executor
   * StepOptions.park: sockets were polled during the device's work), so no timer turn is due until `everyMs`
   * after it.
   */
  async between(parkedAt = -Infinity): Promise<void> {
    if (parkedAt > this.#last) this.#last = parkedAt;
    // The hop first also means a due timer is armed from a fresh macrotask (no 4 ms nesting clamp in Deno).
    await hop();
    if (performance.now() - this.#last < this.everyMs) return;
    this.turns++;
    await new Promise<void>((r) => setTimeout(r, 0));
    this.#last = performance.now();
  }
}
