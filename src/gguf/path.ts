// bloomery GGUF: what a model path names, checked before the file is opened: a regular file, or a
// clear refusal (no such file, a dangling symbolic link, a link loop, a directory, a FIFO, a device)
// instead of an open that blocks forever (a FIFO) or an internal error (EISDIR).
import { lstatSync, readdirSync, readlinkSync, statSync, type Stats } from "node:fs";
import { GgufError, safeText } from "./errors.ts";

function code(e: unknown): string {
  return (e as { code?: string }).code ?? "";
}

/** Throws a GgufError saying what `path` is when it is not a regular file that can be opened. */
export function checkModelPath(path: string): void {
  let st: Stats;
  try {
    st = statSync(path);
  } catch (e) {
    switch (code(e)) {
      case "ENOENT": {
        let target: string | undefined;
        try {
          if (lstatSync(path).isSymbolicLink()) target = readlinkSync(path);
        } catch {
          // the path itself is absent
        }
        if (target !== undefined) throw new GgufError(path, `is a symbolic link to '${safeText(target, 200)}', which does not exist`, "missing");
        throw new GgufError(path, "no such file", "missing");
      }
      case "ELOOP":
        throw new GgufError(path, "is a symbolic link loop (too many levels of symbolic links): it leads to no file", "missing");
      case "ENOTDIR":
        throw new GgufError(path, "no such file (a part of the path before its last name is a file, not a directory)", "missing");
      case "EACCES":
        throw new GgufError(path, "cannot be read: permission denied (on the file or a directory above it)", "not-a-file");
      case "ENAMETOOLONG":
        throw new GgufError(path, "no such file (the path is too long)", "missing");
      default:
        throw new GgufError(path, `cannot be read: ${e instanceof Error ? e.message : String(e)}`, "not-a-file");
    }
  }
  if (st.isFile()) return;
  throw new GgufError(path, notAFile(path, st), "not-a-file");
}

function notAFile(path: string, st: Stats): string {
  if (st.isDirectory()) {
    let ggufs: string[] = [];
    try {
      ggufs = readdirSync(path).filter((n) => n.endsWith(".gguf")).sort();
    } catch {
      // unreadable: say only what it is
    }
    const inside = ggufs.length
      ? `; it holds ${ggufs.slice(0, 3).map((n) => `'${safeText(n)}'`).join(", ")}${ggufs.length > 3 ? ` and ${ggufs.length - 3} more` : ""}: pass one of them with -m (a split set by its first part)`
      : "";
    return `is a directory with no .safetensors file and no model.safetensors.index.json, so neither a GGUF file nor a checkpoint folder: -m takes the model's .gguf file or a Hugging Face safetensors folder${inside}`;
  }
  const what = st.isFIFO() ? "a named pipe (FIFO)" : st.isSocket() ? "a socket" : st.isCharacterDevice() ? "a character device" : st.isBlockDevice() ? "a block device" : "not a regular file";
  return `is ${what}, not a regular file: a model is read from a GGUF file on disk (it is mapped into memory, so a pipe or device cannot serve it)`;
}
