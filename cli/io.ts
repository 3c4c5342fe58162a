// The command line's terminal side, the same under Deno and Bun: synchronous stdout writes whose failures are
// seen where they happen (a closed pipe ends the command quietly; a full disk is an error under both
// runtimes), the one error printer (one line, control characters escaped), terminal checks, and progress
// lines on stderr that a terminal shows and a pipe never gets.
import { writeSync } from "node:fs";

type DenoLike = {
  addSignalListener(s: "SIGINT", h: () => void): void;
  removeSignalListener(s: "SIGINT", h: () => void): void;
  stdout: { writeSync(b: Uint8Array): number };
  stderr: { writeSync(b: Uint8Array): number; isTerminal(): boolean };
  stdin: { isTerminal(): boolean };
  exit(code: number): never;
};
type ProcessLike = {
  exit(code: number): never;
  on(s: "SIGINT", h: () => void): void;
  off(s: "SIGINT", h: () => void): void;
  stdin?: { isTTY?: boolean };
  stderr?: { isTTY?: boolean };
};
const g = globalThis as unknown as { Deno?: DenoLike; process?: ProcessLike };

/** stdout was closed by its reader (`| head`): the command stops quietly with exit 0. */
export class StdoutClosed extends Error {
  override name = "StdoutClosed";
}

/** Writing stdout failed for another reason (a full disk): one error line, exit 1. */
export class OutputError extends Error {
  override name = "OutputError";
}

const enc = new TextEncoder();

function writeAll(fd: 1 | 2, b: Uint8Array): void {
  let off = 0;
  while (off < b.length) {
    try {
      if (g.Deno) off += (fd === 1 ? g.Deno.stdout : g.Deno.stderr).writeSync(b.subarray(off));
      else off += writeSync(fd, b, off, b.length - off);
    } catch (e) {
      const err = e as { code?: string; name?: string; message?: string };
      if (err.code === "EAGAIN") continue; // a non-blocking pipe that is full: try again
      if (err.code === "EPIPE" || err.name === "BrokenPipe") throw new StdoutClosed("stdout closed");
      throw new OutputError(`cannot write to ${fd === 1 ? "stdout" : "stderr"}: ${err.message ?? String(e)}`);
    }
  }
}

/** Writes text to stdout now (a failure throws StdoutClosed or OutputError here, not later). */
export function out(s: string): void {
  writeAll(1, enc.encode(s));
}

/** Writes a line to stderr; a closed or failing stderr is ignored (there is nowhere left to say it). */
export function err(s: string): void {
  try {
    writeAll(2, enc.encode(s));
  } catch { /* nothing to do */ }
}

/**
 * Makes text safe for one terminal line: control characters (newline, ESC, DEL, C1) become visible escapes,
 * so a string from a model file or an argument can neither split the error line nor drive the terminal.
 */
export function escapeControl(s: string): string {
  // deno-lint-ignore no-control-regex
  return s.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, (c) => {
    const n = c.charCodeAt(0);
    return c === "\n" ? "\\n" : c === "\r" ? "\\r" : c === "\t" ? "\\t" : n < 0x100 ? `\\x${n.toString(16).padStart(2, "0")}` : `\\u${n.toString(16)}`;
  });
}

/** The one error printer: `poot: <what>` on one line of stderr. */
export function printError(message: string): void {
  err(`poot: ${escapeControl(message)}\n`);
}

export function stderrIsTerminal(): boolean {
  try {
    return g.Deno ? g.Deno.stderr.isTerminal() : g.process?.stderr?.isTTY === true;
  } catch {
    return false;
  }
}

export function stdinIsTerminal(): boolean {
  try {
    return g.Deno ? g.Deno.stdin.isTerminal() : g.process?.stdin?.isTTY === true;
  } catch {
    return false;
  }
}

/** A progress line on stderr when it is a terminal (rewritten in place); nothing otherwise. */
export function progressLine(): { show(s: string, force?: boolean): void; done(): void } {
  const on = stderrIsTerminal();
  let shown = false, last = 0;
  return {
    /** Redraws at most every 100 ms unless `force` (the last step of a phase). */
    show(s, force = false) {
      if (!on) return;
      const now = performance.now();
      if (!force && now - last < 100) return;
      last = now;
      err(`\r\x1b[2K${escapeControl(s)}`);
      shown = true;
    },
    done() {
      if (on && shown) err("\r\x1b[2K");
      shown = false;
    },
  };
}

export function exit(code: number): never {
  if (g.Deno) return g.Deno.exit(code);
  return g.process!.exit(code);
}

/**
 * Ctrl-C: the first calls `stop` (the command ends what it is doing and says so), a second exits at once
 * (130). Returns the function that removes the handler.
 */
export function onInterrupt(stop: () => void): () => void {
  let pressed = false;
  const h = () => {
    if (pressed) exit(130);
    pressed = true;
    stop();
  };
  try {
    if (g.Deno) g.Deno.addSignalListener("SIGINT", h);
    else g.process?.on("SIGINT", h);
  } catch {
    return () => {}; // no signals here (Windows without SIGINT support): Ctrl-C keeps its default
  }
  return () => {
    try {
      if (g.Deno) g.Deno.removeSignalListener("SIGINT", h);
      else g.process?.off("SIGINT", h);
    } catch { /* already gone */ }
  };
}
