// bloomery engine: the model's bytes that already lie in RAM because its GGUF files sit on a tmpfs
// (/dev/shm, a RAM disk). Mapping such a file adds no memory: the plans count those tensors as
// available RAM, where MemAvailable left them out (shared memory is not reclaimable).
import { statfsSync } from "node:fs";
import type { GgufFile } from "../gguf/index.ts";

const TMPFS_MAGIC = 0x01021994;
const RAMFS_MAGIC = 0x858458f6;

/** Whether a path lies on a tmpfs or ramfs (false where it cannot be told). */
export function onTmpfs(path: string): boolean {
  try {
    const t = statfsSync(path).type;
    return t === TMPFS_MAGIC || t === RAMFS_MAGIC;
  } catch {
    return false;
  }
}

/**
 * Bytes of the tensors `used` names (every tensor when omitted) whose GGUF file lies on a tmpfs:
 * mapped in place, they take no RAM beyond the file's own. Tensors of other files (a checkpoint
 * folder's shards, repacked at load) are not counted.
 */
export function tmpfsResidentBytes(f: GgufFile, used?: (name: string) => boolean): number {
  const seen = new Map<string, boolean>();
  let bytes = 0;
  for (const t of f.tensors.values()) {
    if (used && !used(t.name)) continue;
    if (!t.file.endsWith(".gguf")) continue;
    let tmp = seen.get(t.file);
    if (tmp === undefined) seen.set(t.file, (tmp = onTmpfs(t.file)));
    if (tmp) bytes += t.nbytes;
  }
  return bytes;
}
