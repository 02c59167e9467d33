// bloomery hf: the `-hf owner/repo[:TAG]` text and which repository files it means: repo id
// rules, quant-tag matching at separator boundaries, companion files skipped, split sets whole.
// Follows llama.cpp's choice (common/download.cpp): tag match case-insensitive, default tags
// Q4_K_M then Q8_0 then the first model file; a split set is picked by its first part.
import { HfError } from "./errors.ts";

/** What the user asked for: a repository, and either a quant tag or an exact file. */
export interface HfModelSpec {
  /** "owner/name" */
  repo: string;
  /** quant tag such as Q4_K_M (case-insensitive); default Q4_K_M, then Q8_0, then the first model */
  tag?: string;
  /** exact path of a file in the repository (`-hff`); overrides tag */
  file?: string;
  /** branch, tag or 40-hex commit; default "main" */
  revision?: string;
}

/** One file of a repository listing (the tree API's entry, or a file found in the cache). */
export interface RepoFile {
  path: string;
  /** bytes; -1 when unknown (files listed from the cache) */
  size: number;
  /** blob name in the cache: the LFS sha256, else the git blob sha1; "" when unknown */
  oid: string;
  /** sha256 of the content when the file is stored in LFS */
  sha256?: string;
}

export const DEFAULT_TAGS: readonly string[] = ["Q4_K_M", "Q8_0"];

const REPO_PART = /^[A-Za-z0-9_]+(?:[.-][A-Za-z0-9_]+)*$/;
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/;
const REVISION_RE = /^[A-Za-z0-9_][A-Za-z0-9_.\-/]*$/;
const SPLIT_RE = /^(.+)-(\d{5})-of-(\d{5})\.gguf$/i;
/** Companion files that are not a model of their own (projector, importance matrix, drafts). */
const COMPANION_RE = /mmproj|imatrix|draft|mtp-|eagle3-|dflash-|dspark-/i;

/** True when `id` is a valid "owner/name" repository id (one slash, names of [A-Za-z0-9_] joined by single . or -). */
export function isValidRepoId(id: string): boolean {
  if (id.length === 0 || id.length > 256) return false;
  const parts = id.split("/");
  return parts.length === 2 && REPO_PART.test(parts[0]) && REPO_PART.test(parts[1]);
}

/** Parse llama's `owner/repo[:TAG]` spelling (the tag after the last colon; empty means default). */
export function parseHfRepo(text: string): { repo: string; tag?: string } {
  const colon = text.indexOf(":");
  const repo = colon < 0 ? text : text.slice(0, colon);
  const tag = colon < 0 ? "" : text.slice(colon + 1);
  if (!isValidRepoId(repo)) {
    throw new HfError("E_HF_BAD_SPEC", `--hf-repo '${text}': expected <owner>/<model>[:quant], e.g. unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M`);
  }
  if (tag.includes(":") || (tag !== "" && !TAG_RE.test(tag))) {
    throw new HfError("E_HF_BAD_SPEC", `--hf-repo '${text}': quant tag '${tag}' may hold only letters, digits, '_', '.' and '-'`);
  }
  return tag === "" ? { repo } : { repo, tag };
}

/** Check a whole spec (from parseHfRepo or built by a caller) and fill the revision. */
export function checkSpec(spec: HfModelSpec): Required<Pick<HfModelSpec, "repo" | "revision">> & HfModelSpec {
  if (!isValidRepoId(spec.repo)) throw new HfError("E_HF_BAD_SPEC", `repository '${spec.repo}': expected <owner>/<model>`);
  if (spec.tag !== undefined && spec.tag !== "" && !TAG_RE.test(spec.tag)) {
    throw new HfError("E_HF_BAD_SPEC", `quant tag '${spec.tag}' may hold only letters, digits, '_', '.' and '-'`);
  }
  if (spec.file !== undefined) checkRepoPath(spec.file, "--hf-file");
  const revision = spec.revision ?? "main";
  if (!REVISION_RE.test(revision) || revision.includes("..") || revision.endsWith("/")) {
    throw new HfError("E_HF_BAD_SPEC", `revision '${revision}' is not a branch, tag or commit name`);
  }
  return { ...spec, revision };
}

/** A repository path must stay inside its snapshot: relative, no '..', no empty or '.' segments, no '\\'. */
export function checkRepoPath(path: string, what = "repository path"): void {
  const bad =
    path.length === 0 || path.length > 1024 || path.startsWith("/") || path.includes("\\") || path.includes("\0") ||
    path.split("/").some((s) => s === "" || s === "." || s === "..");
  if (bad) throw new HfError("E_HF_BAD_SPEC", `${what} '${path}' is not a relative path inside the repository`);
}

export interface SplitInfo {
  /** path without the `-NNNNN-of-NNNNN.gguf` suffix (or without `.gguf`) */
  prefix: string;
  index: number;
  count: number;
}

/** Split-set position of a GGUF path: `x-00002-of-00005.gguf` -> {prefix x, index 2, count 5}. */
export function splitInfo(path: string): SplitInfo {
  const m = SPLIT_RE.exec(path);
  if (m) return { prefix: m[1], index: Number(m[2]), count: Number(m[3]) };
  return { prefix: path.replace(/\.gguf$/i, ""), index: 1, count: 1 };
}

function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** A GGUF that is a model of its own (not a projector, imatrix or draft/MTP companion). */
export function isModelGguf(path: string): boolean {
  return /\.gguf$/i.test(path) && !COMPANION_RE.test(baseName(path));
}

function escapeRe(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Does `path` carry `tag` between separators (start or -./ before it, -./ after it), ignoring case? */
export function pathHasTag(path: string, tag: string): boolean {
  return new RegExp(`(?:^|[-./])${escapeRe(tag)}[-./]`, "i").test(path);
}

/** The quant tag a model file name carries (the last -/. separated word before .gguf), upper case. */
export function fileTag(path: string): string {
  const m = /[-.]([A-Za-z0-9_]+)$/.exec(splitInfo(baseName(path)).prefix);
  return m ? m[1].toUpperCase() : "";
}

/** Every part of the split set `first` belongs to, in order; refuses a set with a part missing. */
export function splitParts(files: readonly RepoFile[], first: RepoFile, missingCode: "E_HF_NOT_FOUND" | "E_OFFLINE_NOT_CACHED" = "E_HF_NOT_FOUND"): RepoFile[] {
  const info = splitInfo(first.path);
  if (info.count <= 1) return [first];
  const parts: RepoFile[] = [];
  const missing: string[] = [];
  for (let i = 1; i <= info.count; i++) {
    const name = `${info.prefix}-${String(i).padStart(5, "0")}-of-${String(info.count).padStart(5, "0")}.gguf`;
    const f = files.find((x) => x.path.toLowerCase() === name.toLowerCase());
    if (f) parts.push(f);
    else missing.push(name);
  }
  if (missing.length > 0) {
    throw new HfError(missingCode, `split set ${info.prefix} has ${info.count} parts but ${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} missing`);
  }
  return parts;
}

/** The model files `spec` means among `files`: one file, or every part of a split set (first part first). */
export function selectFiles(files: readonly RepoFile[], spec: HfModelSpec, where: string = spec.repo, missingCode: "E_HF_NOT_FOUND" | "E_OFFLINE_NOT_CACHED" = "E_HF_NOT_FOUND"): RepoFile[] {
  const sorted = [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  if (spec.file !== undefined) {
    const f = sorted.find((x) => x.path === spec.file);
    if (!f) {
      throw new HfError(missingCode, `file '${spec.file}' is not in ${where}`, availableHint(sorted));
    }
    // any part of a split set means the whole set, first part first
    return splitParts(sorted, f, missingCode);
  }
  const models = sorted.filter((f) => isModelGguf(f.path) && splitInfo(f.path).index === 1);
  const tags = spec.tag ? [spec.tag] : DEFAULT_TAGS;
  for (const t of tags) {
    const hit = models.find((f) => pathHasTag(f.path, t));
    if (hit) return splitParts(sorted, hit, missingCode);
  }
  if (!spec.tag && models.length > 0) return splitParts(sorted, models[0], missingCode);
  const folder = checkpointFiles(sorted);
  if (models.length === 0 && folder) {
    if (spec.tag) throw new HfError(missingCode === "E_HF_NOT_FOUND" ? "E_HF_NO_MATCH" : missingCode, `${where} is a safetensors checkpoint folder with no GGUF file: it has no quant tag '${spec.tag}'`, `use -hf ${spec.repo} (no tag) to serve the folder as it is`);
    return folder;
  }
  if (models.length === 0) {
    throw new HfError(missingCode === "E_HF_NOT_FOUND" ? "E_HF_NO_MATCH" : missingCode, `${where} has no GGUF model file`, availableHint(sorted));
  }
  throw new HfError(
    missingCode === "E_HF_NOT_FOUND" ? "E_HF_NO_MATCH" : missingCode,
    `no GGUF in ${where} matches quant tag '${spec.tag}'`,
    availableHint(sorted),
  );
}

/** The side files a checkpoint folder is served with (beside its root .safetensors files). */
const FOLDER_SIDE_FILES = new Set(["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
  "special_tokens_map.json", "hf_quant_config.json", "model.safetensors.index.json"]);

/**
 * A Hugging Face checkpoint folder's files (a repository with no GGUF: config.json and .safetensors at its
 * root): the root .safetensors files and the side files the loader reads; undefined when it is not one.
 */
export function checkpointFiles(files: readonly RepoFile[]): RepoFile[] | undefined {
  const root = files.filter((f) => !f.path.includes("/"));
  if (!root.some((f) => f.path === "config.json") || !root.some((f) => f.path.endsWith(".safetensors"))) return undefined;
  return root.filter((f) => f.path.endsWith(".safetensors") || FOLDER_SIDE_FILES.has(f.path));
}

/** "available quant tags: Q4_K_M, Q8_0 (or pick a file with --hf-file)" for a refusal. */
export function availableHint(files: readonly RepoFile[]): string {
  const models = files.filter((f) => isModelGguf(f.path) && splitInfo(f.path).index === 1);
  if (models.length === 0) return "the repository must hold .gguf files (llama.cpp's format)";
  const tags = [...new Set(models.map((f) => fileTag(f.path)).filter((t) => t !== ""))];
  const files5 = models.slice(0, 5).map((f) => f.path).join(", ");
  return tags.length > 0
    ? `available quant tags: ${tags.join(", ")} (or pick a file with --hf-file, e.g. ${files5})`
    : `pick a file with --hf-file: ${files5}`;
}
