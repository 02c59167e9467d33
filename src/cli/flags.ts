// bloomery-serve's command line: parseArgs turns argv + LLAMA_ARG_* variables into typed ServerOptions (llama-server's flags).

import type { SAMPLER_NAMES } from "./flag-define.ts";
import { tableHelp } from "./flag-help.ts";
import { parseWithTable, type Env, type ValueOrigin } from "./flag-parse.ts";
import { SERVER_FLAG_TABLE } from "./flag-table.ts";
import { FlagError, FlagTableError, type FlagValue, type JsonObject, type TensorOverride } from "./flag-types.ts";

export { FlagError } from "./flag-types.ts";
export type { Env } from "./flag-parse.ts";

/** Sampler names as llama-server spells them in `--samplers` and in /props (the infill sampler is refused). */
export type SamplerName = Exclude<(typeof SAMPLER_NAMES)[number], "infill">;

/** Every supported llama-server option, with llama's default when not given. */
export interface ServerOptions {
  // model
  /** -m: GGUF file (first part of a split set). */
  readonly model: string | undefined;
  /** --demo: serve the demo model built into the executable. */
  readonly demo: boolean;
  /** --recommend: print what this machine can serve and exit. */
  readonly recommend: boolean;
  /** --dry-run: print the plan a start would use and exit. */
  readonly dryRun: boolean;
  /** --json / BLOOMERY_JSON_EVENTS: JSON output and events on stdout (agent mode). */
  readonly json: boolean;
  /** -hf: `<user>/<model>[:quant]`. */
  readonly hfRepo: string | undefined;
  /** -hff: file inside the --hf-repo repository. */
  readonly hfFile: string | undefined;
  /** -hft / HF_TOKEN. */
  readonly hfToken: string | undefined;
  readonly offline: boolean;
  /** -a: names the API answers to (deduplicated, in order); empty means the file name. */
  readonly alias: readonly string[];
  /** -lm / --mmap / --no-mmap: auto (mmap), none (plain reads), mmap. */
  readonly loadMode: "auto" | "none" | "mmap";

  // context, slots, batching
  /** -c: 0 = the model's training context. Shared by all slots. */
  readonly ctxSize: number;
  /** -np: slots; -1 = auto. */
  readonly nParallel: number;
  /** --slot-ctx: tokens per slot (0 = from -c: split over -np N, or each slot's with -np auto). */
  readonly slotCtx: number;
  /** -n: default generation limit; -1 = none. */
  readonly nPredict: number;
  /** -t: 0 or less = one per core. */
  readonly threads: number;
  /** -tb: 0 or less = same as threads. */
  readonly threadsBatch: number;
  readonly batchSize: number;
  readonly ubatchSize: number;
  readonly contBatching: boolean;
  readonly flashAttn: "on" | "off" | "auto";
  readonly cacheTypeK: "f16";
  readonly cacheTypeV: "f16";
  readonly contextShift: boolean;
  readonly cachePrompt: boolean;
  readonly cacheReuse: number;
  /** -cram: prompt cache budget in MiB; -1 = no limit, 0 = off. */
  readonly cacheRamMiB: number;
  readonly warmup: boolean;

  // placement
  /** -ngl: a layer count, auto (fit) or all. */
  readonly nGpuLayers: number | "auto" | "all";
  /** -dev: device names; empty = every GPU; ["none"] = CPU only. */
  readonly devices: readonly string[];
  /** -ts: proportions per GPU; empty = by free memory. */
  readonly tensorSplit: readonly number[];
  readonly splitMode: "none" | "layer";
  readonly mainGpu: number;
  /** -cmoe: every expert in host memory. */
  readonly cpuMoe: boolean;
  /** -ncmoe: experts of the first N layers in host memory. */
  readonly nCpuMoe: number;
  /** -ot: in the order given. */
  readonly overrideTensor: readonly TensorOverride[];
  /** --fit: fit the settings not given into free device memory. */
  readonly fit: boolean;
  /** -fitt: MiB left free per device; one value applies to all. */
  readonly fitTargetMiB: readonly number[];
  /** --host-budget: plan as if the host had at most this many MiB available (0 = what it has). */
  readonly hostBudgetMiB: number;
  /** --card-budget: plan as if the card had at most this many MiB free (0 = what it has). */
  readonly cardBudgetMiB: number;
  /** --promote-slots: card slots a host-expert layer for promoted experts (0 = off; -1 = auto, PROMOTE_AUTO: what the card has left). */
  readonly promoteSlots: number;
  /** --batch-invariant: the card's exact mode (the CPU always is). */
  readonly batchInvariant: boolean;

  // chat templates
  readonly jinja: boolean;
  readonly chatTemplate: string | undefined;
  readonly chatTemplateFile: string | undefined;
  readonly chatTemplateKwargs: JsonObject;
  readonly reasoningFormat: "none" | "auto" | "deepseek" | "deepseek-legacy";
  /** --spec-type: none, ngram-simple (its lookup and draft lengths), draft-simple (-md, implied by -md alone) or draft-mtp */
  readonly specType: "none" | "ngram-simple" | "draft-simple" | "draft-mtp";
  readonly specDraftModel: string | undefined;
  readonly specDraftNgl: number | "auto" | "all";
  readonly specDraftNMax: number;
  readonly specDraftNMin: number;
  readonly specDraftPMin: number;
  readonly specNgramSimpleSizeN: number;
  readonly specNgramSimpleSizeM: number;
  /** -1 unlimited, 0 no thinking, N a budget. */
  readonly reasoningBudget: number;
  /** --reasoning-effort: the template's `reasoning_effort` for every request; "default" sets none. */
  readonly reasoningEffort: string;

  // HTTP server
  /** The first of `hosts`. */
  readonly host: string;
  readonly hosts: readonly string[];
  /** 0 = any free port. */
  readonly port: number;
  /** --api-key / LLAMA_API_KEY (keys from --api-key-file are read by the server). */
  readonly apiKeys: readonly string[];
  readonly apiKeyFile: string | undefined;
  /** Seconds. */
  readonly timeout: number;
  readonly metrics: boolean;
  readonly slots: boolean;
  readonly props: boolean;
  readonly slotSavePath: string | undefined;
  /** --ui / --no-ui (--webui): serve the web UI. */
  readonly ui: boolean;
  /** --path: static files served at / instead of the built-in UI. */
  readonly staticPath: string | undefined;
  /** --api-prefix: every route under this path ("" = none; normalized: a leading slash, no trailing one). */
  readonly apiPrefix: string;
  /** llama-server's CORS settings */
  readonly corsOrigins: string;
  readonly corsMethods: string;
  readonly corsHeaders: string;
  readonly corsCredentials: boolean;
  /** --tags: listed with the model in /v1/models */
  readonly tags: readonly string[];

  // sampling defaults (a request's own fields win)
  /** -1 = random. */
  readonly seed: number;
  /** Clamped at 0 as llama does; 0 samples greedily. */
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly minP: number;
  readonly typicalP: number;
  readonly repeatPenalty: number;
  readonly repeatLastN: number;
  readonly presencePenalty: number;
  readonly frequencyPenalty: number;
  readonly dryMultiplier: number;
  readonly dryBase: number;
  readonly dryAllowedLength: number;
  readonly dryPenaltyLastN: number;
  readonly drySequenceBreakers: readonly string[];
  readonly xtcProbability: number;
  readonly xtcThreshold: number;
  readonly samplers: readonly SamplerName[];
  readonly ignoreEos: boolean;

  // logging
  readonly verbose: boolean;
  readonly logDisable: boolean;
}

export type ServerOptionKey = keyof ServerOptions;

export type ParsedArgs =
  | {
      readonly action: "serve";
      readonly options: ServerOptions;
      /** Options given on the command line or through the environment (what --fit must not change). */
      readonly explicit: ReadonlySet<ServerOptionKey>;
      /** Where each explicit option came from. */
      readonly origins: Readonly<Partial<Record<ServerOptionKey, ValueOrigin>>>;
      /** Worth printing at start: repeated flags, variables overridden by flags. */
      readonly warnings: readonly string[];
    }
  | { readonly action: "help"; readonly text: string }
  | { readonly action: "version" }
  | { readonly action: "list-devices" };

/** What the help says first: the other ways to start and the subcommands (src/cli/main.ts). */
const SERVER_HELP_PREAMBLE = `       bloomery-serve --demo [options]              serve the demo model built into the executable
       bloomery-serve --recommend [--json]          the models this machine can serve, with the command for each
       bloomery-serve -m FILE --dry-run [--json]    the plan a start would use (placement, slots), loading nothing
       bloomery-serve SUBCOMMAND [options]          (each subcommand takes --help)

subcommands:
  generate -m FILE -p TEXT [options]   generate from a prompt without a server (--json for scripts)
  bench -m FILE [options]              llama-bench's tests and table (-npl N,...: llama-batched-bench's)
  synth MODEL[:QUANT] -o FILE          write a synthetic model: a real model's tensor names, shapes, quant types
  perplexity -m FILE -f TEXT [options] llama-perplexity's protocol and output (--kl-divergence against saved logits)
  version                              print the version (also --version)

Server flags are llama-server's, in its groups; bloomery's own flags are among them. The flags
llama-server has that bloomery does not support yet are listed once at the end.
`;

/** The full help text: the subcommands, every supported flag with spellings, env twin and default, then the refused ones by reason. */
export function serverHelpText(): string {
  return tableHelp(SERVER_FLAG_TABLE, "bloomery-serve [options]                     serve a model (-m FILE, -m NAME or -hf REPO)", { preamble: SERVER_HELP_PREAMBLE });
}

type Values = Readonly<Record<string, FlagValue | undefined>>;

function wrongType(key: string, want: string, v: unknown): never {
  throw new FlagTableError(`flag table: ${key} holds ${JSON.stringify(v)}, expected ${want}`);
}

function num(values: Values, key: string): number {
  const v = values[key];
  return typeof v === "number" ? v : wrongType(key, "a number", v);
}

function bool(values: Values, key: string): boolean {
  const v = values[key];
  return typeof v === "boolean" ? v : wrongType(key, "a boolean", v);
}

function optStr(values: Values, key: string): string | undefined {
  const v = values[key];
  return v === undefined || typeof v === "string" ? v : wrongType(key, "a string", v);
}

function str(values: Values, key: string): string {
  const v = values[key];
  return typeof v === "string" ? v : wrongType(key, "a string", v);
}

function oneOf<T extends string>(values: Values, key: string, allowed: readonly T[]): T {
  const v = values[key];
  return typeof v === "string" && (allowed as readonly string[]).includes(v) ? (v as T) : wrongType(key, allowed.join("|"), v);
}

function list<T extends FlagValue>(values: Values, key: string, is: (e: FlagValue) => e is T): T[] {
  const v = values[key];
  if (!Array.isArray(v) || !v.every(is)) return wrongType(key, "a list", v);
  return v as T[];
}

const isString = (e: FlagValue): e is string => typeof e === "string";
const isNumber = (e: FlagValue): e is number => typeof e === "number";
const isOverride = (e: FlagValue): e is TensorOverride =>
  typeof e === "object" && e !== null && !Array.isArray(e) && typeof (e as TensorOverride).pattern === "string";

function jsonObject(values: Values, key: string): JsonObject {
  const v = values[key];
  return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as JsonObject) : wrongType(key, "a JSON object", v);
}

function gpuLayers(v: FlagValue | undefined): number | "auto" | "all" {
  if (v === "auto" || v === "all") return v;
  if (typeof v !== "number") return wrongType("nGpuLayers", "a number, auto or all", v);
  if (v === -1) return "auto";
  return v < -1 ? "all" : v;
}

/** --spec-type's kind: -md alone means draft-simple (as llama-server infers it from the draft). */
function specTypeOf(t: string, draft: string | undefined): ServerOptions["specType"] {
  if (t.includes("ngram-simple")) return "ngram-simple";
  // the target's own MTP layer, or -md's
  if (t.includes("draft-mtp")) return "draft-mtp";
  if (t.includes("draft-simple")) {
    if (!draft) throw new FlagError("--spec-type", "draft-simple needs a draft model (-md FNAME)");
    return "draft-simple";
  }
  return draft ? "draft-simple" : "none";
}

function buildOptions(v: Values): ServerOptions {
  const hosts = list(v, "hosts", isString);
  return {
    model: optStr(v, "model"),
    demo: bool(v, "demo"),
    recommend: bool(v, "recommend"),
    dryRun: bool(v, "dryRun"),
    json: bool(v, "json"),
    hfRepo: optStr(v, "hfRepo"),
    hfFile: optStr(v, "hfFile"),
    hfToken: optStr(v, "hfToken"),
    offline: bool(v, "offline"),
    alias: [...new Set(list(v, "alias", isString))],
    loadMode: oneOf(v, "loadMode", ["auto", "none", "mmap"] as const),
    ctxSize: num(v, "ctxSize"),
    nParallel: num(v, "nParallel"),
    slotCtx: num(v, "slotCtx"),
    nPredict: num(v, "nPredict"),
    threads: num(v, "threads"),
    threadsBatch: num(v, "threadsBatch"),
    batchSize: num(v, "batchSize"),
    ubatchSize: num(v, "ubatchSize"),
    contBatching: bool(v, "contBatching"),
    flashAttn: oneOf(v, "flashAttn", ["on", "off", "auto"] as const),
    cacheTypeK: oneOf(v, "cacheTypeK", ["f16"] as const),
    cacheTypeV: oneOf(v, "cacheTypeV", ["f16"] as const),
    contextShift: bool(v, "contextShift"),
    cachePrompt: bool(v, "cachePrompt"),
    cacheReuse: num(v, "cacheReuse"),
    cacheRamMiB: num(v, "cacheRamMiB"),
    warmup: bool(v, "warmup"),
    nGpuLayers: gpuLayers(v["nGpuLayers"]),
    devices: list(v, "devices", isString),
    tensorSplit: list(v, "tensorSplit", isNumber),
    splitMode: oneOf(v, "splitMode", ["none", "layer"] as const),
    mainGpu: num(v, "mainGpu"),
    cpuMoe: bool(v, "cpuMoe"),
    nCpuMoe: num(v, "nCpuMoe"),
    overrideTensor: list(v, "overrideTensor", isOverride),
    fit: bool(v, "fit"),
    fitTargetMiB: list(v, "fitTargetMiB", isNumber),
    hostBudgetMiB: num(v, "hostBudgetMiB"),
    cardBudgetMiB: num(v, "cardBudgetMiB"),
    promoteSlots: num(v, "promoteSlots"),
    batchInvariant: bool(v, "batchInvariant"),
    jinja: bool(v, "jinja"),
    chatTemplate: optStr(v, "chatTemplate"),
    chatTemplateFile: optStr(v, "chatTemplateFile"),
    chatTemplateKwargs: jsonObject(v, "chatTemplateKwargs"),
    reasoningFormat: oneOf(v, "reasoningFormat", ["none", "auto", "deepseek", "deepseek-legacy"] as const),
    specType: specTypeOf(String(v.specType ?? "none"), optStr(v, "specDraftModel")),
    specDraftModel: optStr(v, "specDraftModel"),
    specDraftNgl: gpuLayers(v["specDraftNgl"]),
    specDraftNMax: num(v, "specDraftNMax"),
    specDraftNMin: num(v, "specDraftNMin"),
    specDraftPMin: num(v, "specDraftPMin"),
    specNgramSimpleSizeN: num(v, "specNgramSimpleSizeN"),
    specNgramSimpleSizeM: num(v, "specNgramSimpleSizeM"),
    reasoningBudget: num(v, "reasoningBudget"),
    reasoningEffort: optStr(v, "reasoningEffort") ?? "default",
    host: hosts[0] ?? wrongType("hosts", "at least one address", hosts),
    hosts,
    port: num(v, "port"),
    apiKeys: list(v, "apiKeys", isString),
    apiKeyFile: optStr(v, "apiKeyFile"),
    timeout: num(v, "timeout"),
    metrics: bool(v, "metrics"),
    slots: bool(v, "slots"),
    props: bool(v, "props"),
    slotSavePath: optStr(v, "slotSavePath"),
    ui: bool(v, "ui"),
    staticPath: optStr(v, "staticPath"),
    apiPrefix: normalizePrefix(optStr(v, "apiPrefix") ?? ""),
    corsOrigins: str(v, "corsOrigins"),
    corsMethods: str(v, "corsMethods"),
    corsHeaders: str(v, "corsHeaders"),
    corsCredentials: bool(v, "corsCredentials"),
    tags: list(v, "tags", isString),
    seed: num(v, "seed"),
    temperature: Math.max(0, num(v, "temperature")),
    topK: num(v, "topK"),
    topP: num(v, "topP"),
    minP: num(v, "minP"),
    typicalP: num(v, "typicalP"),
    repeatPenalty: num(v, "repeatPenalty"),
    repeatLastN: num(v, "repeatLastN"),
    presencePenalty: num(v, "presencePenalty"),
    frequencyPenalty: num(v, "frequencyPenalty"),
    dryMultiplier: num(v, "dryMultiplier"),
    dryBase: num(v, "dryBase"),
    dryAllowedLength: num(v, "dryAllowedLength"),
    dryPenaltyLastN: num(v, "dryPenaltyLastN"),
    drySequenceBreakers: list(v, "drySequenceBreakers", isString),
    xtcProbability: num(v, "xtcProbability"),
    xtcThreshold: num(v, "xtcThreshold"),
    samplers: list(v, "samplers", isString) as SamplerName[],
    ignoreEos: bool(v, "ignoreEos"),
    verbose: bool(v, "verbose"),
    logDisable: bool(v, "logDisable"),
  };
}

/** --api-prefix: "/llm" for "llm", "/llm/" or "/llm"; "" for "" or "/"; a prefix with a query, fragment or dot segment is refused. */
function normalizePrefix(p: string): string {
  const t = p.trim().replace(/\/+$/, "");
  if (t === "") return "";
  const out = t.startsWith("/") ? t : `/${t}`;
  if (/[?#\s\\]/.test(out) || out.split("/").some((seg, i) => i > 0 && (seg === "" || seg === "." || seg === "..")))
    throw new FlagError("--api-prefix", `'${p}' is not a path prefix (expected something like /llm: segments without ?, #, spaces, empty or dot segments)`);
  return out;
}

/** Rules that involve more than one flag. */
function validate(o: ServerOptions): void {
  if (o.chatTemplate !== undefined && o.chatTemplateFile !== undefined) {
    throw new FlagError("--chat-template-file", "--chat-template and --chat-template-file both give the chat template; use one");
  }
  if (o.slotCtx > 0 && o.ctxSize > 0) {
    const n = o.nParallel, c = o.ctxSize, s = o.slotCtx;
    if (n > 0 && c !== n * s)
      throw new FlagError("--slot-ctx", `-c ${c} and --slot-ctx ${s} disagree: -np ${n} slots of ${s} tokens make a context of ${n * s}; give -c ${n * s}, or only one of -c and --slot-ctx`);
    if (n <= 0 && c !== s)
      throw new FlagError("--slot-ctx", `-c ${c} and --slot-ctx ${s} disagree: with -np auto both give each slot's context; give only one of them (or a fixed -np N with -c N x ${s})`);
  }
  if (o.hfFile !== undefined && o.hfRepo === undefined) {
    throw new FlagError("--hf-file", "--hf-file names a file of the --hf-repo repository, but no --hf-repo is given");
  }
}

/**
 * Parses bloomery-serve's arguments (without the program name) and environment. Flags beat their
 * LLAMA_ARG_* twins. Throws FlagError for an unknown, refused or badly valued flag.
 */
export function parseArgs(argv: readonly string[], env: Env): ParsedArgs {
  const parsed = parseWithTable(SERVER_FLAG_TABLE, argv, env);
  if (parsed.action === "help") return { action: "help", text: serverHelpText() };
  if (parsed.action === "version") return { action: "version" };
  if (parsed.action === "list-devices") return { action: "list-devices" };
  const options = buildOptions(parsed.values);
  validate(options);
  const origins: Partial<Record<ServerOptionKey, ValueOrigin>> = {};
  for (const [key, origin] of Object.entries(parsed.origins)) {
    if (key in options) origins[key as ServerOptionKey] = origin;
    if (key === "hosts") origins.host = origin;
  }
  return {
    action: "serve",
    options,
    explicit: new Set(Object.keys(origins) as ServerOptionKey[]),
    origins,
    warnings: parsed.warnings,
  };
}

/** The options a bare `bloomery-serve` gets (llama-server's defaults). */
export function defaultServerOptions(): ServerOptions {
  const parsed = parseWithTable(SERVER_FLAG_TABLE, [], {});
  return buildOptions(parsed.values);
}
