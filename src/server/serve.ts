// bloomery server: `bloomery-serve [flags]`: parse llama-server's flags, listen at once (503
// "Loading model" until ready), load the model into the engine worker, serve until SIGINT/SIGTERM.
// Agent mode (src/cli/agent-*.ts, docs/agents.md): --recommend, --dry-run, -m NAME, JSON events
// on stdout with --json, and a named exit code with the command to run next for every refusal.
import { modelSamplingDefaults } from "../sampling/model-defaults.ts";
import { mkdirSync, readFileSync } from "node:fs";
import type { Server } from "bun";
import { FlagError, parseArgs, type Env, type ServerOptions } from "../cli/flags.ts";
import { AgentError, commandLine, engineLoadError, toAgentError, withoutFlags } from "../cli/agent-exit.ts";
import { EventStream, jsonWanted } from "../cli/agent-events.ts";
import { probeMachine, probedCards, type Machine } from "../cli/agent-machine.ts";
import { planStart } from "../cli/agent-plan.ts";
import { machineFor, resolveSource, sourceOptions, type ModelSource } from "../cli/agent-resolve.ts";
import { openGeometry } from "../cli/agent-run.ts";
import { getChatTemplate } from "../chat/index.ts";
import { EngineClient } from "../engine/client.ts";
import { GgufFile } from "../gguf/index.ts";
import { defaultProgress, hfOptionsFromEnv, resolveHfModel } from "../hf/index.ts";
import { Tokenizer, vocabFromMetadata } from "../tokenizer/index.ts";
import { buildApp } from "./app.ts";
import { middleware } from "./http.ts";
import { Admission } from "./metrics.ts";
import { BUILTIN_TEMPLATES, type Log, ServerContext } from "./state.ts";
import { frontend } from "./webui/routes.ts";
import { StaticDirError } from "./webui/static-dir.ts";

/** Largest request body (MiB); BLOOMERY_MAX_BODY_MB overrides. */
const DEFAULT_MAX_BODY_MB = 64;

/** A refusal before anything starts: a flag or file the flags name is wrong (E_USAGE). */
class StartError extends AgentError {
  constructor(message: string, next = "bloomery-serve --help") {
    super("E_USAGE", message, next);
  }
}

function readApiKeys(o: ServerOptions): string[] {
  const keys = [...o.apiKeys];
  if (o.apiKeyFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(o.apiKeyFile, "utf8");
    } catch (e) {
      throw new StartError(`--api-key-file: cannot read '${o.apiKeyFile}': ${e instanceof Error ? e.message : String(e)}`);
    }
    for (const line of text.split(/\r?\n/)) if (line.trim() !== "") keys.push(line.trim());
  }
  return keys.filter((k) => k !== "");
}

function flagTemplateSource(o: ServerOptions): string | undefined {
  if (o.chatTemplateFile !== undefined) {
    try {
      return readFileSync(o.chatTemplateFile, "utf8");
    } catch (e) {
      throw new StartError(`--chat-template-file: cannot read '${o.chatTemplateFile}': ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  const t = o.chatTemplate;
  if (t === undefined) return undefined;
  if (t in BUILTIN_TEMPLATES) return BUILTIN_TEMPLATES[t];
  if (t.includes("{{") || t.includes("{%")) return t;
  throw new StartError(`--chat-template: '${t}' is neither Jinja source nor a built-in template (${Object.keys(BUILTIN_TEMPLATES).join(", ")}); use --chat-template-file for a template in a file`);
}

/** The template the flags give, checked to parse before anything starts. */
function flagTemplate(o: ServerOptions): string | undefined {
  const src = flagTemplateSource(o);
  if (src === undefined) return undefined;
  try {
    getChatTemplate(src);
  } catch (e) {
    const flag = o.chatTemplateFile !== undefined ? "--chat-template-file" : "--chat-template";
    throw new StartError(`${flag}: ${e instanceof Error ? e.message : String(e)}`);
  }
  return src;
}

/** The command line with --port 0 instead of the port asked for. */
function commandLineWithPort(argv: readonly string[]): string {
  return commandLine([...withoutFlags(argv, { "--port": true }), "--port", "0"]);
}

function formatHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

function envInt(env: Env, name: string, def: number): number {
  const v = env[name];
  if (v === undefined || v === "") return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new StartError(`${name}: expected a non-negative integer, got '${v}'`);
  return n;
}

async function demoPath(): Promise<() => string> {
  return (await import("../cli/demo.ts")).demoModelPath;
}

/** Runs the server; resolves with the exit code once it stops. */
export async function runServe(argv: string[], env: Env): Promise<number> {
  const events = new EventStream(jsonWanted(argv, env));
  const refuse = (e: unknown): number => {
    const a = toAgentError(e, argv);
    console.error(a.toText());
    events.emit(a.toEvent());
    return a.exitCode;
  };
  let parsed;
  try {
    parsed = parseArgs(argv, env);
  } catch (e) {
    if (e instanceof FlagError) return refuse(new AgentError("E_USAGE", e.message, "bloomery-serve --help"));
    throw e;
  }
  if (parsed.action === "help") {
    console.log(parsed.text);
    return 0;
  }
  if (parsed.action === "version") {
    console.log("bloomery-serve 0.1.0");
    return 0;
  }
  if (parsed.action === "list-devices") {
    const { devicesText } = await import("../cli/list-devices.ts");
    const { probeMachine } = await import("../cli/agent-machine.ts");
    const { text, notes } = devicesText(probeMachine().cards);
    process.stdout.write(text);
    for (const n of notes) process.stderr.write(`${n}\n`);
    return 0;
  }
  const o = parsed.options;
  const log: Log = o.logDisable ? () => {} : (line) => console.error(line);
  const agent = { o, explicit: parsed.explicit, argv, env, json: o.json, demoPath: await demoPath() };
  if (o.recommend) return (await import("../cli/agent-run.ts")).runRecommend(agent);
  if (o.dryRun) return (await import("../cli/agent-run.ts")).runDryRun(agent);
  try {
    return await serve(o, parsed.explicit, parsed.warnings, env, log, argv, events);
  } catch (e) {
    return refuse(e);
  }
}

async function serve(
  o0: ServerOptions, explicit: ReadonlySet<keyof ServerOptions>, warnings: readonly string[], env: Env, log: Log, argv: readonly string[], events: EventStream,
): Promise<number> {
  for (const w of warnings) log(`warn: ${w}`);
  // which model: a file, the demo, a known name (-> its repository and quant), or -hf
  let machine: Machine | undefined;
  const probe = () => (machine ??= probeMachine("/", probedCards(o0.devices)));
  const src: ModelSource = resolveSource(o0, await demoPath(), probe);
  const o = sourceOptions(o0, src);
  if (src.known?.geometry) {
    // a known model's size is known before the download: refuse now what would not fit
    const pre = planStart({ o, explicit, argv, source: src, machine: machineFor(o, probe()), dryRun: false, geometry: src.known.geometry });
    if (pre.refusal) throw pre.refusal;
  }
  if (src.byName && src.kind === "hf") log(`srv  load_model: ${o0.model ?? ""} is ${src.hfText} (quant ${src.known?.chosen ?? "given"})`);
  const apiKeys = readApiKeys(o);
  if (o.slotSavePath !== undefined) {
    try {
      mkdirSync(o.slotSavePath, { recursive: true });
    } catch (e) {
      throw new StartError(`--slot-save-path: cannot create '${o.slotSavePath}': ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  const tplOverride = flagTemplate(o);
  const maxBodyBytes = envInt(env, "BLOOMERY_MAX_BODY_MB", DEFAULT_MAX_BODY_MB) * 1024 * 1024;
  const loadDelayMs = envInt(env, "BLOOMERY_TEST_LOAD_DELAY_MS", 0);
  const ctx = new ServerContext(o, apiKeys, log);
  ctx.body.start();

  // listen first: /health answers 503 while the model loads
  const app = buildApp(ctx, maxBodyBytes);
  let ui;
  try {
    ui = frontend({ ui: o.ui, staticPath: o.staticPath, prefix: o.apiPrefix });
  } catch (e) {
    if (e instanceof StaticDirError) throw new StartError(e.message);
    throw e;
  }
  const fetch = middleware(ctx, (req) => app.handle(req), { maxBodyBytes, prefix: o.apiPrefix, frontend: ui });
  const servers: Server<undefined>[] = [];
  const urls: string[] = [];
  const tcpHosts = o.hosts.filter((h) => !h.endsWith(".sock"));
  if (o.port === 0 && tcpHosts.length > 1) throw new StartError("--port 0 is not supported with more than one --host");
  const idleTimeout = Math.min(255, Math.max(0, o.timeout));
  try {
    for (const host of o.hosts) {
      const common = { fetch, maxRequestBodySize: 2 * maxBodyBytes + (1 << 20), error: () => new Response("Internal Server Error", { status: 500 }) };
      const s = host.endsWith(".sock") ? Bun.serve({ ...common, unix: host }) : Bun.serve({ ...common, idleTimeout, hostname: host, port: o.port });
      servers.push(s as Server<undefined>);
      const where = host.endsWith(".sock") ? `unix://${host}` : `http://${formatHost(host)}:${s.port}`;
      urls.push(host.endsWith(".sock") ? where : where + o.apiPrefix); // where the API answers (the log line keeps llama's address)
      log(`main: server is listening on ${where} - starting the main loop`);
    }
  } catch (e) {
    for (const s of servers) s.stop(true);
    const code = (e as { code?: string }).code;
    const msg = `couldn't bind HTTP server socket (${o.hosts.join(", ")}:${o.port}): ${e instanceof Error ? e.message : String(e)}`;
    if (code === "EADDRINUSE" || code === "EACCES") throw new AgentError("E_PORT_IN_USE", msg, `${commandLineWithPort(argv)}   # any free port; the ready event names it`, code);
    if (code === "EADDRNOTAVAIL") throw new AgentError("E_USAGE", `--host: ${msg}`, commandLine([...withoutFlags(argv, { "--host": true }), "--host", "127.0.0.1"]), code);
    throw new AgentError("E_INTERNAL", msg, commandLine([...withoutFlags(argv, { "--host": true, "--port": true }), "--host", "127.0.0.1", "--port", "0"]), code);
  }
  if (!o.ui) log("srv  init: the web UI is disabled (--ui / --no-ui turn it on and off)");
  else if (o.staticPath !== undefined) log(`srv  init: serving static files from ${o.staticPath} at ${o.apiPrefix}/`);
  else log(`srv  init: web UI: chat at ${o.apiPrefix}/, the experts' placement at ${o.apiPrefix}/placement`);
  events.emit({ event: "listening", url: urls.find((u) => u.startsWith("http")) ?? urls[0], urls });
  if (o.corsOrigins === "*" && apiKeys.length === 0) log("srv  init: security: no API key is set and CORS allows all origins (--cors-origins localhost, or --api-key)");
  if (apiKeys.length === 1) log(`srv  init: api_keys: ****${apiKeys[0].slice(-4)}`);
  else if (apiKeys.length > 1) log(`srv  init: api_keys: ${apiKeys.length} keys loaded`);

  let stopNow: () => void = () => {};
  const stopped = new Promise<void>((r) => (stopNow = r));
  const onSignal = () => {
    log("srv  operator(): operator(): cleaning up before exit...");
    stopNow();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  const shutdown = (code: number) => {
    if (code === 0) events.emit({ event: "stopped", exit_code: 0 });
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    for (const s of servers) s.stop(true);
    ctx.client?.close();
    ctx.body.close();
    return code;
  };

  const stopCtl = new AbortController();
  void stopped.then(() => stopCtl.abort());
  const t0 = performance.now();
  try {
    let modelPath = o.model ?? "";
    if (src.kind === "hf") {
      const h = hfOptionsFromEnv(env);
      log(`srv  load_model: resolving -hf ${o.hfRepo}${o.hfFile ? ` (file ${o.hfFile})` : ""}`);
      const got = await resolveHfModel(src.spec!, {
        offline: o.offline || h.offline,
        token: o.hfToken ?? (h.token || undefined),
        endpoint: h.endpoint,
        cacheDir: h.cacheDir,
        onProgress: events.downloads() ?? (o.logDisable ? undefined : defaultProgress(process.stderr)),
        signal: stopCtl.signal,
      });
      modelPath = got.path;
    }
    ctx.modelPath = modelPath;
    if (loadDelayMs > 0) await Bun.sleep(loadDelayMs);
    const geometry = openGeometry(modelPath);
    const gguf = geometry.gguf as GgufFile;
    const vocab = vocabFromMetadata((k) => gguf.raw(k));
    const md = modelSamplingDefaults((k) => gguf.raw(k), explicit);
    ctx.modelDefaults = md.defaults;
    if (md.line) log(`srv  load_model: ${md.line}`);
    ctx.tokenizer = Tokenizer.fromVocab(vocab);
    ctx.body.setTokenizer(ctx.tokenizer, vocab);
    const plan = planStart({ o, explicit, argv, source: src, machine: machineFor(o, probe()), dryRun: false, geometry, path: modelPath });
    events.emit(plan.event);
    if (plan.refusal) throw plan.refusal;
    for (const n of plan.event.notes) log(n.startsWith("srv ") ? n : `srv  load_model: ${n}`);
    if (plan.event.backend.kind === "cpu" && plan.event.backend.reason) log(plan.event.backend.reason); // on a card the worker's placement says it
    log(`srv  load_model: loading model '${modelPath}'`);
    events.emit({ event: "loading", path: modelPath });
    const starting = EngineClient.start(modelPath, plan.engine!.engine).catch((e: unknown) => Promise.reject(engineLoadError(e, argv)));
    const client = await Promise.race([starting, stopped.then(() => null)]);
    if (client === null) {
      // stopped while loading: the worker, once loaded, would keep the process alive
      starting.then((c) => c.close(), () => {});
      return shutdown(0);
    }
    ctx.client = client;
    ctx.info = client.info;
    ctx.setTemplate(tplOverride, client.info.chatTemplate);
    const maxQueue = envInt(env, "BLOOMERY_MAX_QUEUE", Math.max(16, 4 * client.info.nSlots));
    ctx.admission = new Admission(client.info.nSlots, maxQueue);
    log(`srv  load_model: ${client.info.nSlots} slots, ${client.info.nCtxSlot} tokens each, ${client.info.backend} backend; chat format ${ctx.chatFormat.family}; wait queue ${maxQueue}`);
  } catch (e) {
    if (stopCtl.signal.aborted) return shutdown(0);
    const a = toAgentError(e, argv);
    log(`srv  load_model: failed to load model '${ctx.modelPath || o.hfRepo}': ${a.message}`);
    log("main: exiting due to model loading error");
    shutdown(a.exitCode);
    throw a;
  }
  ctx.status = "ready";
  log("main: model loaded");
  const info = ctx.info!;
  events.emit({
    event: "ready", url: urls.find((u) => u.startsWith("http")) ?? urls[0], urls, model: ctx.modelName, backend: info.backend,
    n_slots: info.nSlots, n_ctx_slot: info.nCtxSlot, load_seconds: +((performance.now() - t0) / 1000).toFixed(3),
  });
  await stopped;
  return shutdown(0);
}
