// bloomery CLI: which model a start means: a GGUF file (-m PATH), the built-in demo (--demo or
// -m bloomery-demo), a known model by name (-m NAME[:QUANT] -> its repository and the quant that
// fits this machine best, as if -hf repo:quant were given), or a repository (-hf). A -m value that
// is neither a file nor a known name is refused naming the close known names.
import { existsSync, lstatSync } from "node:fs";
import type { ServerOptions } from "./flags.ts";
import { isHfError, parseHfRepo, type HfModelSpec } from "../hf/index.ts";
import { AgentError, commandLine } from "./agent-exit.ts";
import type { Machine } from "./agent-machine.ts";
import { recommend, type ModelQuants, type Recommendation } from "./agent-recommend.ts";
import { geometryFromKnown, type FitOptions, type Geometry } from "./agent-sizes.ts";
import {
  closeKnownNames, DEFAULT_QUANT, DEMO_NAME, findKnownModel, knownModelByRepo, knownQuant, KNOWN_MODELS,
  type KnownModel, type KnownQuant,
} from "./known-models.ts";

export interface KnownChoice {
  model: KnownModel;
  /** the quant's entry in the table (undefined for a tag the table does not list) */
  quant: KnownQuant | undefined;
  tag: string;
  /** how the quant was chosen */
  chosen: "given" | "recommended" | "default";
  /** the recommendation the choice came from (chosen = recommended) */
  recommendation?: Recommendation;
  /** sizes before any download (from the model's shape) */
  geometry?: Geometry;
}

export interface ModelSource {
  kind: "file" | "demo" | "hf";
  /** local GGUF (file, demo) */
  path?: string;
  /** what -hf means (hf) */
  spec?: HfModelSpec;
  /** the -hf text (`owner/repo[:tag]`) */
  hfText?: string;
  /** a known model (by name, or a repository of the table) */
  known?: KnownChoice;
  /** started by a known name (-m NAME) */
  byName: boolean;
  /** the model id the API answers to unless -a is given */
  alias?: string;
}

/** The machine as the flags let a model use it: -ngl 0 or -dev none leave only the CPU. */
export function machineFor(o: ServerOptions, m: Machine): Machine {
  const cpuOnly = o.nGpuLayers === 0 || (o.devices.length === 1 && o.devices[0] === "none");
  return cpuOnly ? { ...m, cuda: { ...m.cuda, usable: false, reason: m.cuda.reason || "-ngl 0 / -dev none: CPU only" } } : m;
}

/** Fit settings from the flags (the server's slot split, -ub, threads). */
export function fitOptionsFor(o: ServerOptions, cores: number): Omit<FitOptions, "exact"> {
  return { nParallel: o.nParallel, maxTokens: Math.min(o.ubatchSize, o.batchSize), nThreads: o.threads > 0 ? o.threads : Math.max(1, cores) };
}

function knownChoice(model: KnownModel, tag: string | undefined, machine: () => Machine, o: ServerOptions): KnownChoice {
  if (tag !== undefined) {
    const quant = knownQuant(model, tag);
    return { model, quant, tag: quant?.name ?? tag, chosen: "given", geometry: quant ? geometryFromKnown(model, quant) : undefined };
  }
  const m = machineFor(o, machine());
  const mq: ModelQuants = { model, quants: [] };
  for (const quant of model.quants) {
    const geometry = geometryFromKnown(model, quant);
    if (geometry) mq.quants.push({ quant, geometry });
  }
  const rec = recommend(m, [mq], fitOptionsFor(o, m.cpu.cores)).models[0].recommended;
  const name = rec?.quant ?? DEFAULT_QUANT;
  const quant = knownQuant(model, name);
  return { model, quant, tag: name, chosen: rec ? "recommended" : "default", recommendation: rec ?? undefined, geometry: quant ? geometryFromKnown(model, quant) : undefined };
}

function notFound(o: ServerOptions): AgentError {
  const text = o.model ?? "";
  const close = closeKnownNames(text);
  const hint = close.length
    ? `; it is not a known model name either - did you mean ${close.join(", ")}?`
    : `; it is not a known model name either (known: ${KNOWN_MODELS.map((k) => k.name).join(", ")})`;
  const next = close.length ? commandLine(["-m", close[0]]) : "bloomery-serve --recommend   # the models this machine can serve, with the command for each";
  return new AgentError("E_MODEL_NOT_FOUND", `-m: model file '${text}' does not exist${hint}`, next);
}

/**
 * The model a start means. `demoPath` gives the built-in demo's file; `machine` is probed only when
 * a known name needs its quant chosen.
 */
export function resolveSource(o: ServerOptions, demoPath: () => string, machine: () => Machine): ModelSource {
  const demo = (): ModelSource => {
    try {
      return { kind: "demo", path: demoPath(), byName: true, alias: DEMO_NAME };
    } catch (e) {
      throw new AgentError("E_MODEL_NOT_FOUND", e instanceof Error ? e.message : String(e), "bloomery-serve --recommend   # models to download instead");
    }
  };
  if (o.demo) {
    if (o.model !== undefined || o.hfRepo !== undefined) throw new AgentError("E_USAGE", "--demo serves the built-in demo model: leave out -m and -hf", "bloomery-serve --demo");
    return demo();
  }
  if (o.model !== undefined) {
    // a path that exists, even as a dangling link or a link loop, is a file start: opening it says what it is
    if (existsSync(o.model) || isLink(o.model)) return { kind: "file", path: o.model, byName: false };
    const found = findKnownModel(o.model);
    if (!found) throw notFound(o);
    if (found.model.name === DEMO_NAME) return demo();
    const known = knownChoice(found.model, found.quant, machine, o);
    const repo = found.model.repo!;
    return { kind: "hf", spec: { repo, tag: known.tag }, hfText: `${repo}:${known.tag}`, known, byName: true, alias: found.model.name };
  }
  if (o.hfRepo !== undefined) {
    let parsed: { repo: string; tag?: string };
    try {
      parsed = parseHfRepo(o.hfRepo);
    } catch (e) {
      if (isHfError(e)) throw new AgentError("E_USAGE", e.message, "bloomery-serve -hf <owner>/<model>[:quant]   # e.g. -hf unsloth/Qwen3-30B-A3B-Instruct-2507-GGUF:Q4_K_M", e.code);
      throw e;
    }
    const spec: HfModelSpec = { repo: parsed.repo, tag: parsed.tag, file: o.hfFile };
    const model = o.hfFile === undefined ? knownModelByRepo(parsed.repo) : undefined;
    let known: KnownChoice | undefined;
    if (model) {
      const quant = knownQuant(model, parsed.tag ?? DEFAULT_QUANT);
      known = { model, quant, tag: quant?.name ?? parsed.tag ?? DEFAULT_QUANT, chosen: parsed.tag ? "given" : "default", geometry: quant ? geometryFromKnown(model, quant) : undefined };
    }
    return { kind: "hf", spec, hfText: o.hfRepo, known, byName: false };
  }
  throw new AgentError(
    "E_USAGE",
    "no model given: pass a GGUF file with -m FNAME, a known model name with -m NAME, or a repository with -hf <user>/<model>[:quant]",
    "bloomery-serve --recommend   # or: bloomery-serve --demo",
  );
}

function isLink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

/** The options a start runs with once the source is known (-m path, or -hf text; the alias of a known name). */
export function sourceOptions(o: ServerOptions, src: ModelSource): ServerOptions {
  const alias = o.alias.length === 0 && src.alias ? [src.alias] : o.alias;
  if (src.kind === "hf") return { ...o, model: undefined, hfRepo: src.hfText, alias };
  return { ...o, model: src.path, alias };
}

