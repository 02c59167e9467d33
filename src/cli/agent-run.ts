// bloomery CLI: the agent commands that start nothing: `--recommend [--json]` (what this machine
// can serve) and `--dry-run [--json]` (the plan a start would use; downloads and loads nothing).
// With --json each prints exactly one JSON object on stdout: the report, the plan, or the error.
import { GgufError } from "../gguf/index.ts";
import { openModelPath } from "../safetensors/model.ts";
import { hfOptionsFromEnv, isHfError, planHfModel, type HfErrorCode, type HfPlan } from "../hf/index.ts";
import type { Env, ServerOptionKey, ServerOptions } from "./flags.ts";
import { AgentError, ggufAgentError, toAgentError } from "./agent-exit.ts";
import { probeMachine, probedCards, type Machine } from "./agent-machine.ts";
import { planStart, planText } from "./agent-plan.ts";
import { knownModelQuants, recommend, recommendText } from "./agent-recommend.ts";
import { fitOptionsFor, machineFor, resolveSource, sourceOptions, type ModelSource } from "./agent-resolve.ts";
import { geometryFromGguf, type Geometry } from "./agent-sizes.ts";

export interface AgentCommand {
  o: ServerOptions;
  explicit: ReadonlySet<ServerOptionKey>;
  argv: readonly string[];
  env: Env;
  json: boolean;
  /** the built-in demo's file (demo.ts) */
  demoPath: () => string;
  out?: { write(s: string): unknown };
}

/** Refusals that mean "the hub could not be asked" (not "the hub said no"). */
const UNREACHABLE: ReadonlySet<HfErrorCode> = new Set(["E_HF_NETWORK", "E_OFFLINE_NOT_CACHED"]);

function fail(c: AgentCommand, e: unknown): number {
  const a = toAgentError(e, c.argv);
  if (c.json) (c.out ?? process.stdout).write(`${JSON.stringify(a.toEvent())}\n`);
  console.error(a.toText());
  return a.exitCode;
}

/** `--recommend`: the machine and, for each known model, the fastest quant and placement that fits. */
export function runRecommend(c: AgentCommand): number {
  try {
    const machine = probeMachine();
    const { models, notes } = knownModelQuants(c.demoPath);
    for (const n of notes) console.error(`warn: ${n}`);
    const m = machineFor(c.o, machine);
    const report = recommend(m, models, fitOptionsFor(c.o, m.cpu.cores));
    (c.out ?? process.stdout).write(c.json ? `${JSON.stringify(report)}\n` : `${recommendText(report)}\n`);
    return 0;
  } catch (e) {
    return fail(c, e);
  }
}

/** Open a local GGUF and read its geometry (a malformed or unsupported file is E_BAD_MODEL). */
export function openGeometry(path: string): Geometry {
  try {
    return geometryFromGguf(openModelPath(path, { copies: false }));
  } catch (e) {
    if (e instanceof GgufError) throw ggufAgentError(e);
    throw e;
  }
}

/** `--dry-run`: the plan a start with these flags would use; exits with the refusal's code when it would be refused. */
export async function runDryRun(c: AgentCommand): Promise<number> {
  try {
    let machine: Machine | undefined;
    const probe = () => (machine ??= probeMachine("/", probedCards(c.o.devices)));
    const src: ModelSource = resolveSource(c.o, c.demoPath, probe);
    const o = sourceOptions(c.o, src);
    let geometry: Geometry | undefined = src.known?.geometry;
    let hfPlan: HfPlan | undefined;
    let path = src.path;
    const notes: string[] = [];
    if (src.kind === "hf") {
      const h = hfOptionsFromEnv(c.env);
      try {
        hfPlan = await planHfModel(src.spec!, { offline: o.offline || h.offline, token: o.hfToken ?? (h.token || undefined), endpoint: h.endpoint, cacheDir: h.cacheDir });
        if (hfPlan.files.every((f) => f.cached)) path = hfPlan.path;
      } catch (e) {
        // a known model is planned from its shape when the hub cannot be asked; the start would download
        if (!(isHfError(e) && UNREACHABLE.has(e.code) && geometry)) throw e;
        notes.push(`the repository's file list is not available (${e.code}): sizes come from the known model table; the start downloads the files`);
      }
    }
    if (path !== undefined) geometry = openGeometry(path);
    const plan = planStart({ o, explicit: c.explicit, argv: c.argv, source: src, machine: machineFor(o, probe()), dryRun: true, geometry, hfPlan, path });
    plan.event.notes.unshift(...notes);
    (c.out ?? process.stdout).write(c.json ? `${JSON.stringify(plan.event)}\n` : `${planText(plan.event)}\n`);
    if (plan.refusal) {
      console.error(plan.refusal.toText());
      return plan.refusal.exitCode;
    }
    return 0;
  } catch (e) {
    return fail(c, e);
  }
}
