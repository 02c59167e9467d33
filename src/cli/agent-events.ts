// bloomery CLI: agent mode's event stream: with --json (or BLOOMERY_JSON_EVENTS=1) a start writes
// one JSON object a line on stdout (download progress, plan, listening, loading, ready, error,
// stopped); human logs stay on stderr. docs/agents.md lists the shapes.
import type { DownloadEvent } from "../hf/index.ts";
import type { ErrorEvent } from "./agent-exit.ts";
import type { PlanEvent } from "./agent-plan.ts";

export interface ListeningEvent {
  event: "listening";
  /** the first TCP address (http://host:port), or unix://path */
  url: string;
  urls: string[];
}

export interface LoadingEvent {
  event: "loading";
  path: string;
}

export interface ReadyEvent {
  event: "ready";
  url: string;
  urls: string[];
  /** the id /v1/models answers with */
  model: string;
  backend: string;
  n_slots: number;
  n_ctx_slot: number;
  load_seconds: number;
}

export interface StoppedEvent {
  event: "stopped";
  exit_code: number;
}

export type AgentEvent = DownloadEvent | PlanEvent | ListeningEvent | LoadingEvent | ReadyEvent | ErrorEvent | StoppedEvent;

export interface LineSink {
  write(text: string): unknown;
}

/** Where events go: JSON lines on `out` when enabled, nowhere otherwise. */
export class EventStream {
  constructor(
    readonly enabled: boolean,
    private readonly out: LineSink = process.stdout,
  ) {}

  emit(e: AgentEvent): void {
    if (this.enabled) this.out.write(`${JSON.stringify(e)}\n`);
  }

  /** A download progress callback that writes the events (undefined when disabled). */
  downloads(): ((e: DownloadEvent) => void) | undefined {
    return this.enabled ? (e) => this.emit(e) : undefined;
  }
}

const TRUE = new Set(["1", "true", "yes", "on"]);

/**
 * Whether the command line asks for JSON output: `--json` among the arguments (looked for before
 * parsing, so a flag error is reported as an event too) or BLOOMERY_JSON_EVENTS=1.
 */
export function jsonWanted(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): boolean {
  return argv.includes("--json") || TRUE.has((env.BLOOMERY_JSON_EVENTS ?? "").trim().toLowerCase());
}
