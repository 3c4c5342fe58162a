import { test } from "node:test";
import assert from "node:assert/strict";
import { VERSION } from "../mod.ts";

test("package exports a version", () => {
  assert.match(VERSION, /^\d+\.\d+\.\d+$/);
});
