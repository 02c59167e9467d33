// bloomery release: writing the archives (reproducible .tar.gz: ustar entries, owner 0, fixed
// mtime, sorted) and the SHA256SUMS file (sha256sum's "<hex>  <name>" lines), and checking both.
import { readFileSync, writeFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { CryptoHasher } from "bun";

export interface ArchiveEntry {
  /** path inside the archive (no leading slash, at most 100 bytes) */
  name: string;
  data: Uint8Array;
  /** permission bits, e.g. 0o755 */
  mode: number;
}

export class ReleaseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ReleaseError";
  }
}

const enc = new TextEncoder();

function putString(h: Uint8Array, off: number, len: number, s: string): void {
  const b = enc.encode(s);
  if (b.length > len) throw new ReleaseError(`tar: '${s}' does not fit a ${len}-byte field`);
  h.set(b, off);
}

function putOctal(h: Uint8Array, off: number, len: number, n: number): void {
  const s = n.toString(8).padStart(len - 1, "0");
  if (s.length > len - 1) throw new ReleaseError(`tar: ${n} does not fit a ${len}-byte octal field`);
  putString(h, off, len, `${s}\0`);
}

function header(e: ArchiveEntry, mtime: number): Uint8Array {
  if (e.name.length === 0 || e.name.startsWith("/") || e.name.split("/").includes("..")) throw new ReleaseError(`tar: bad entry name '${e.name}'`);
  const h = new Uint8Array(512);
  putString(h, 0, 100, e.name);
  putOctal(h, 100, 8, e.mode & 0o7777);
  putOctal(h, 108, 8, 0); // uid
  putOctal(h, 116, 8, 0); // gid
  putOctal(h, 124, 12, e.data.length);
  putOctal(h, 136, 12, mtime);
  h.fill(0x20, 148, 156); // checksum counted as spaces
  h[156] = 0x30; // regular file
  putString(h, 257, 6, "ustar\0");
  putString(h, 263, 2, "00");
  putString(h, 265, 32, "root");
  putString(h, 297, 32, "root");
  let sum = 0;
  for (const b of h) sum += b;
  putString(h, 148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return h;
}

/** An uncompressed ustar archive of `entries` (sorted by name) ending with two zero blocks. */
export function tarBytes(entries: ArchiveEntry[], mtime: number): Uint8Array<ArrayBuffer> {
  const sorted = [...entries].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  let total = 1024;
  for (const e of sorted) total += 512 + Math.ceil(e.data.length / 512) * 512;
  const out = new Uint8Array(total);
  let off = 0;
  for (const e of sorted) {
    out.set(header(e, mtime), off);
    off += 512;
    out.set(e.data, off);
    off += Math.ceil(e.data.length / 512) * 512;
  }
  return out;
}

/** Write `entries` as a gzip-compressed tar to `path`; returns the archive's sha256. */
export function writeTarGz(path: string, entries: ArchiveEntry[], mtime: number, level: 1 | 6 | 9 = 9): string {
  const gz = Bun.gzipSync(tarBytes(entries, mtime), { level });
  writeFileSync(path, gz);
  return sha256Hex(gz);
}

export function sha256Hex(data: Uint8Array): string {
  return new CryptoHasher("sha256").update(data).digest("hex");
}

export function sha256File(path: string): string {
  return sha256Hex(readFileSync(path));
}

/** Write SHA256SUMS in `dir` over every file `include` accepts (sorted; sha256sum -c reads it). */
export function writeSums(dir: string, include: (name: string) => boolean): string {
  const names = readdirSync(dir).filter((n) => n !== "SHA256SUMS" && include(n) && statSync(join(dir, n)).isFile()).sort();
  const text = names.map((n) => `${sha256File(join(dir, n))}  ${n}\n`).join("");
  const path = join(dir, "SHA256SUMS");
  writeFileSync(path, text);
  return path;
}

/** Parse SHA256SUMS text into name -> hex; refuses a malformed line. */
export function parseSums(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const [i, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue;
    const m = /^([0-9a-f]{64}) [ *](\S.*)$/.exec(line);
    if (!m) throw new ReleaseError(`SHA256SUMS line ${i + 1} is not '<sha256>  <file>': ${line.slice(0, 80)}`);
    out.set(m[2], m[1]);
  }
  return out;
}

/** Check every file SHA256SUMS in `dir` lists; returns the names checked, throws on a mismatch. */
export function verifySums(dir: string): string[] {
  const sums = parseSums(readFileSync(join(dir, "SHA256SUMS"), "utf8"));
  for (const [name, want] of sums) {
    const got = sha256File(join(dir, name));
    if (got !== want) throw new ReleaseError(`${name}: sha256 ${got} does not match SHA256SUMS (${want})`);
  }
  return [...sums.keys()];
}
