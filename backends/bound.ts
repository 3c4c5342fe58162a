// The Engine's bound on every wait it awaits from a device (the error model of backends/contract.ts): one interval
// timer per engine checks the open waits, ticking only while one is open (a timer armed and cleared per step
// costs microseconds of a token) and unreferenced while none is (it must not keep the process alive), so a device
// whose wait never settles still yields DeviceTimeout on time: within the bound plus an eighth of it, at most
// 100 ms late.
import { DeviceTimeout } from "./errors.ts";
import { clearInterval, setInterval } from "node:timers";

interface Wait {
  deadline: number;
  expire: () => void;
}

export class Bound {
  readonly #waits = new Set<Wait>();
  #timer: ReturnType<typeof setInterval> | undefined;

  /** `onExpire` hears of each wait given up on (`what`, as the DeviceTimeout names it) before its promise rejects. */
  constructor(readonly ms: number, readonly backend: string, readonly onExpire: (what: string) => void) {}

  /** Settles as `p` does, or rejects with DeviceTimeout once `ms` have passed. */
  wait<T>(what: string, p: Promise<T>): Promise<T> {
    const ms = this.ms;
    return new Promise<T>((resolve, reject) => {
      const w: Wait = {
        deadline: performance.now() + ms,
        expire: () => {
          this.onExpire(what);
          reject(new DeviceTimeout(this.backend, what, ms));
        },
      };
      this.#watch(w);
      p.then((v) => {
        this.#unwatch(w);
        resolve(v);
      }, (e) => {
        this.#unwatch(w);
        reject(e);
      });
    });
  }

  /** Stops the timer (the engine is unloaded). */
  close(): void {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #watch(w: Wait): void {
    this.#waits.add(w);
    if (!this.#timer) {
      this.#timer = setInterval(() => {
        const now = performance.now();
        for (const x of this.#waits) {
          if (now < x.deadline) continue;
          this.#waits.delete(x);
          x.expire();
        }
        if (this.#waits.size === 0) this.#timer?.unref();
      }, Math.max(1, Math.min(100, this.ms / 8)));
    } else if (this.#waits.size === 1) this.#timer.ref();
  }

  #unwatch(w: Wait): void {
    this.#waits.delete(w);
    if (this.#waits.size === 0) this.#timer?.unref();
  }
}
