// GgufFile.open on paths that are not regular files (a directory, a FIFO, a link loop, a dangling
// link), and untrusted text in GGUF errors: escaped (control characters, bidi overrides) and cut.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GgufError, GgufFile, GgufWriter, safeText } from "../src/gguf/index.ts";
import { AgentError } from "../src/cli/agent-exit.ts";

const dir = mkdtempSync(join(tmpdir(), "bloomery-gguf-paths-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function fault(path: string): GgufError {
  try {
    GgufFile.open(path);
  } catch (e) {
    if (e instanceof GgufError) return e;
    throw e;
  }
  throw new Error(`${path} opened`);
}

describe("paths that are not files", () => {
  test("a directory, naming the .gguf files inside", () => {
    const d = join(dir, "model");
    mkdirSync(d);
    for (const n of ["b-00001-of-00002.gguf", "a.gguf", "c.gguf", "d.gguf", "notes.txt"]) writeFileSync(join(d, n), "");
    const e = fault(d);
    expect(e.fault).toBe("not-a-file");
    expect(e.message).toBe(`${d}: is a directory with no .safetensors file and no model.safetensors.index.json, so neither a GGUF file nor a checkpoint folder: -m takes the model's .gguf file or a Hugging Face safetensors folder; it holds 'a.gguf', 'b-00001-of-00002.gguf', 'c.gguf' and 1 more: pass one of them with -m (a split set by its first part)`);
  });

  test("a FIFO is refused without opening it (an open would wait for a writer forever)", () => {
    const f = join(dir, "pipe.gguf");
    expect(Bun.spawnSync(["mkfifo", f]).exitCode).toBe(0);
    const e = fault(f);
    expect(e.fault).toBe("not-a-file");
    expect(e.message).toContain("is a named pipe (FIFO), not a regular file");
  });

  test("a link loop, a dangling link and a missing file: the path names no file", () => {
    symlinkSync(join(dir, "y.gguf"), join(dir, "x.gguf"));
    symlinkSync(join(dir, "x.gguf"), join(dir, "y.gguf"));
    expect(fault(join(dir, "x.gguf"))).toMatchObject({ fault: "missing", detail: "is a symbolic link loop (too many levels of symbolic links): it leads to no file" });
    symlinkSync(join(dir, "gone.gguf"), join(dir, "link.gguf"));
    expect(fault(join(dir, "link.gguf")).detail).toBe(`is a symbolic link to '${join(dir, "gone.gguf")}', which does not exist`);
    expect(fault(join(dir, "none.gguf"))).toMatchObject({ fault: "missing", detail: "no such file" });
    writeFileSync(join(dir, "file"), "x");
    expect(fault(join(dir, "file", "m.gguf")).detail).toContain("no such file (a part of the path before its last name is a file");
  });

  test("a regular file still opens (and a symbolic link to one)", () => {
    const p = join(dir, "ok.gguf");
    new GgufWriter().str("general.architecture", "x").write(p);
    symlinkSync(p, join(dir, "ok-link.gguf"));
    expect(GgufFile.open(join(dir, "ok-link.gguf")).str("general.architecture")).toBe("x");
  });
});

describe("untrusted text in errors", () => {
  test("safeText escapes control characters and bidi overrides, and cuts long text", () => {
    expect(safeText("a\x1b[2Jb\u202ec\nd\u0085")).toBe("a\\x1b[2Jb\\u202ec\\x0ad\\x85");
    expect(safeText("x".repeat(100), 10)).toBe("xxxxxxxxxx... (100 characters)");
    expect(safeText("line 1\nline 2", 80, true)).toBe("line 1\nline 2");
    expect(safeText("ünïcode 名前")).toBe("ünïcode 名前");
  });

  test("a tensor name with escapes, in the file's own errors", () => {
    const w = new GgufWriter();
    w.addTensor("\x1b]0;owned\x07", 0, [4], new Uint8Array(16));
    w.addTensor("\x1b]0;owned\x07", 0, [4], new Uint8Array(16));
    const p = join(dir, "dup.gguf");
    w.write(p);
    const e = fault(p);
    expect(e.message).toContain("duplicate tensor '\\x1b]0;owned\\x07'");
    expect(e.message).not.toMatch(/[\x00-\x09\x0b-\x1f]/);
  });

  test("every GgufError and AgentError message is bounded and escaped, whoever built it", () => {
    const e = new GgufError("f.gguf", `bad \x1b[31m ${"z".repeat(10_000)}`);
    expect(e.message.length).toBeLessThan(2500);
    expect(e.message).not.toContain("\x1b");
    const a = new AgentError("E_BAD_MODEL", `one\ntwo \x1b[0m ${"y".repeat(10_000)}`, "bloomery-serve \x1b[2J");
    expect(a.message.startsWith("one\ntwo \\x1b[0m")).toBe(true);
    expect(a.message.length).toBeLessThan(4100);
    expect(a.next).toBe("bloomery-serve \\x1b[2J");
  });
});
