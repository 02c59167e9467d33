// bloomery hf: the typed error every Hugging Face download refusal gives: a stable code name
// (for the agent interface's exit codes), a message naming what is wrong, and the next step.

/** Stable names of every way a `-hf` download can be refused. */
export type HfErrorCode =
  | "E_HF_BAD_SPEC" // the repo[:tag] text or a file name is malformed
  | "E_HF_NOT_FOUND" // repository, revision or file does not exist (or is private)
  | "E_HF_AUTH" // gated or private repository: token missing, invalid or without access
  | "E_HF_NO_MATCH" // no GGUF in the repository matches the quant tag
  | "E_HF_PROTOCOL" // the hub answered with something that is not what its API promises
  | "E_HF_NETWORK" // the hub could not be reached (and nothing usable is cached)
  | "E_OFFLINE_NOT_CACHED" // offline (or the network failed) and the files are not in the cache
  | "E_DOWNLOAD_CHECKSUM" // downloaded bytes do not hash to the hub's sha256
  | "E_DOWNLOAD_SIZE" // downloaded or cached bytes do not have the hub's size
  | "E_DOWNLOAD_IO" // the cache directory could not be written
  | "E_DOWNLOAD_ABORTED"; // the caller's AbortSignal fired

export const HF_ERROR_CODES: readonly HfErrorCode[] = [
  "E_HF_BAD_SPEC", "E_HF_NOT_FOUND", "E_HF_AUTH", "E_HF_NO_MATCH", "E_HF_PROTOCOL", "E_HF_NETWORK",
  "E_OFFLINE_NOT_CACHED", "E_DOWNLOAD_CHECKSUM", "E_DOWNLOAD_SIZE", "E_DOWNLOAD_IO", "E_DOWNLOAD_ABORTED",
];

export class HfError extends Error {
  /**
   * @param code stable name of the refusal
   * @param message what was refused and why (names the repo / file / path)
   * @param hint what to do next (a command or an action), shown after the message
   */
  constructor(
    readonly code: HfErrorCode,
    message: string,
    readonly hint: string = "",
  ) {
    super(hint ? `${message}; ${hint}` : message);
    this.name = "HfError";
  }
}

export function isHfError(e: unknown): e is HfError {
  return e instanceof HfError;
}
