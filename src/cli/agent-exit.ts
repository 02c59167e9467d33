// bloomery CLI: the named exit codes of bloomery-serve (docs/agents.md) and AgentError, the refusal
// that carries one: what was refused, its code name, and the command to run next.
import { isHfError, type HfError, type HfErrorCode } from "../hf/index.ts";
import { GgufError, safeText } from "../gguf/index.ts";
import { EngineOptionError } from "../server/engine-options.ts";
import { PlacementError } from "../engine/placement.ts";
import { isModelCheckMessage } from "../engine/model-check.ts";

/** Exit status of every way bloomery-serve ends. */
export const EXIT_CODES = {
  OK: 0,
  E_INTERNAL: 1,
  E_USAGE: 2,
  E_MODEL_NOT_FOUND: 3,
  E_DOWNLOAD: 4,
  E_DOES_NOT_FIT: 5,
  E_BAD_MODEL: 6,
  E_PORT_IN_USE: 7,
} as const;

export type ExitName = Exclude<keyof typeof EXIT_CODES, "OK">;

/** One line per code, for the docs and `--help`-like listings. */
export const EXIT_MEANINGS: Readonly<Record<ExitName, string>> = {
  E_INTERNAL: "a failure bloomery did not foresee (a bug, or the engine failed while loading)",
  E_USAGE: "a bad flag, flag value or combination of flags",
  E_MODEL_NOT_FOUND: "the model file, known model name, repository, revision or quant does not exist",
  E_DOWNLOAD: "a download failed: network, authentication, checksum or size, cache not writable, offline without the files",
  E_DOES_NOT_FIT: "the model with this context does not fit the chosen card or the host's memory",
  E_BAD_MODEL: "the file is not a GGUF bloomery can run (malformed, unsupported architecture or tensor types)",
  E_PORT_IN_USE: "the port to listen on is taken (or needs privileges this user lacks)",
};

/** Longest message or next command an AgentError carries. */
const MAX_MESSAGE = 4000;

/** The JSON `error` event (and the `refusal` of a dry-run plan). */
export interface ErrorEvent {
  event: "error";
  /** the exit code's name */
  code: ExitName;
  exit_code: number;
  message: string;
  /** the command to run next */
  next: string;
  /** the finer reason when there is one (an HfError code such as E_HF_AUTH) */
  cause?: string;
}

/** A refusal with a named exit code and the command to run next. */
export class AgentError extends Error {
  override readonly name = "AgentError";
  readonly exitCode: number;

  readonly next: string;

  constructor(
    readonly code: ExitName,
    message: string,
    next: string,
    /** the finer reason when there is one (an HfError code such as E_HF_AUTH) */
    readonly detail?: string,
  ) {
    // what reaches a terminal is escaped and bounded, whatever a file, a server or a flag put in it
    super(safeText(message, MAX_MESSAGE, true));
    this.next = safeText(next, MAX_MESSAGE);
    this.exitCode = EXIT_CODES[code];
  }

  toEvent(): ErrorEvent {
    const e: ErrorEvent = { event: "error", code: this.code, exit_code: this.exitCode, message: this.message, next: this.next };
    if (this.detail !== undefined) e.cause = this.detail;
    return e;
  }

  /** The lines printed on stderr: the message, the next command, the exit code's name. */
  toText(): string {
    return `error: ${this.message}\nnext: ${this.next}\nexit: ${this.exitCode} ${this.code}${this.detail ? ` (${this.detail})` : ""}`;
  }
}

/** Which exit code each download refusal gets. */
export const HF_EXIT: Readonly<Record<HfErrorCode, ExitName>> = {
  E_HF_BAD_SPEC: "E_USAGE",
  E_HF_NOT_FOUND: "E_MODEL_NOT_FOUND",
  E_HF_NO_MATCH: "E_MODEL_NOT_FOUND",
  E_HF_AUTH: "E_DOWNLOAD",
  E_HF_PROTOCOL: "E_DOWNLOAD",
  E_HF_NETWORK: "E_DOWNLOAD",
  E_OFFLINE_NOT_CACHED: "E_DOWNLOAD",
  E_DOWNLOAD_CHECKSUM: "E_DOWNLOAD",
  E_DOWNLOAD_SIZE: "E_DOWNLOAD",
  E_DOWNLOAD_IO: "E_DOWNLOAD",
  E_DOWNLOAD_ABORTED: "E_DOWNLOAD",
};

/** Quote one argument for a POSIX shell (bare when it is safe). */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replaceAll("'", `'\\''`)}'`;
}

/** `bloomery-serve ARGS...` as a shell command line. */
export function commandLine(args: readonly string[]): string {
  return ["bloomery-serve", ...args.map(shellQuote)].join(" ");
}

/** argv without the flags named (and their values, for flags that take one). */
export function withoutFlags(argv: readonly string[], drop: Readonly<Record<string, boolean>>): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const eq = a.indexOf("=");
    const name = a.startsWith("--") && eq > 0 ? a.slice(0, eq) : a;
    if (name in drop) {
      if (drop[name] && eq < 0) i++;
      continue;
    }
    out.push(a);
  }
  return out;
}

/** An HfError as an AgentError: the code from HF_EXIT, the HfError code as the cause, a next command. */
export function fromHfError(e: HfError, argv: readonly string[]): AgentError {
  const again = commandLine(argv);
  const next: Record<HfErrorCode, string> = {
    E_HF_BAD_SPEC: "bloomery-serve -hf <owner>/<model>[:quant]   # e.g. -hf unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF:Q4_K_M",
    E_HF_NOT_FOUND: "bloomery-serve --recommend   # the known models and their repositories",
    E_HF_NO_MATCH: "bloomery-serve --recommend   # or another quant tag, from the list in the message",
    E_HF_AUTH: `HF_TOKEN=<your token> ${again}`,
    E_HF_PROTOCOL: `HF_ENDPOINT=https://huggingface.co ${again}`,
    E_HF_NETWORK: `${again}   # resumes where the download stopped`,
    E_OFFLINE_NOT_CACHED: commandLine(withoutFlags(argv, { "--offline": false })),
    E_DOWNLOAD_CHECKSUM: `${again}   # after deleting the part named in the message`,
    E_DOWNLOAD_SIZE: `${again}   # after deleting the file named in the message`,
    E_DOWNLOAD_IO: `HF_HUB_CACHE=<a writable directory> ${again}`,
    E_DOWNLOAD_ABORTED: again,
  };
  return new AgentError(HF_EXIT[e.code], e.message, next[e.code], e.code);
}

/** Any error thrown while starting, as an AgentError (unknown errors are E_INTERNAL). */
export function toAgentError(e: unknown, argv: readonly string[]): AgentError {
  if (e instanceof AgentError) return e;
  if (isHfError(e)) return fromHfError(e, argv);
  if (e instanceof GgufError) return ggufAgentError(e);
  if (e instanceof EngineOptionError) return new AgentError("E_USAGE", `${e.flag}: ${e.message}`, "bloomery-serve --help");
  if (e instanceof PlacementError) {
    const code = /does not fit/.test(e.message) ? "E_DOES_NOT_FIT" : "E_USAGE";
    return new AgentError(code, e.message, code === "E_DOES_NOT_FIT" ? commandLine([...withoutFlags(argv, NGL), "-ngl", "0"]) : "bloomery-serve --help");
  }
  const msg = e instanceof Error ? e.message : String(e);
  return new AgentError("E_INTERNAL", msg, `${commandLine([...argv, "-v"])}   # and report the log at https://github.com/bloomery/bloomery/issues`);
}

/** A GgufError's exit code: a path that names no file is E_MODEL_NOT_FOUND, anything else E_BAD_MODEL. */
export function ggufAgentError(e: GgufError): AgentError {
  if (e.fault === "missing") return new AgentError("E_MODEL_NOT_FOUND", e.message, "bloomery-serve --recommend   # the models this machine can serve, with the command for each");
  return new AgentError("E_BAD_MODEL", e.message, "bloomery-serve --recommend   # models bloomery runs");
}

const NGL = { "-ngl": true, "--gpu-layers": true, "--n-gpu-layers": true };

/**
 * A failure the engine worker reported while loading (it sends only the message): the card's
 * placement refusal is E_DOES_NOT_FIT; anything else is E_INTERNAL (the plan checked the file,
 * the architecture and the fit before the worker started).
 */
export function engineLoadError(e: unknown, argv: readonly string[]): AgentError {
  const msg = e instanceof Error ? e.message : String(e);
  if (/^the model does not fit /.test(msg)) return new AgentError("E_DOES_NOT_FIT", msg, commandLine([...withoutFlags(argv, NGL), "-ngl", "0"]));
  if (isModelCheckMessage(msg)) return new AgentError("E_BAD_MODEL", msg, "bloomery-serve --recommend   # models bloomery runs");
  return toAgentError(e, argv);
}
