// bloomery server: `bloomery-serve [flags]`: parse llama-server's flags, listen at once (503
// "Loading model" until ready), load the model into the engine worker, serve until SIGINT/SIGTERM.
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import type { Server } from "bun";
import { FlagError, parseArgs, type Env, type ServerOptions } from "../cli/flags.ts";
import { getChatTemplate } from "../chat/index.ts";
import { EngineClient } from "../engine/client.ts";
import { GgufFile } from "../gguf/index.ts";
import { type HfModelSpec, defaultProgress, hfOptionsFromEnv, isHfError, parseHfRepo, resolveHfModel } from "../hf/index.ts";
import { Tokenizer, vocabFromMetadata } from "../tokenizer/index.ts";
import { buildApp } from "./app.ts";
import { EngineOptionError, planEngine } from "./engine-options.ts";
import { middleware } from "./http.ts";
import { Admission } from "./metrics.ts";
import { BUILTIN_TEMPLATES, type Log, ServerContext } from "./state.ts";

/** Largest request body (MiB); BLOOMERY_MAX_BODY_MB overrides. */
const DEFAULT_MAX_BODY_MB = 64;

class StartError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

function readApiKeys(o: ServerOptions): string[] {
  const keys = [...o.apiKeys];
  if (o.apiKeyFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(o.apiKeyFile, "utf8");
    } catch (e) {
      throw new StartError(`--api-key-file: cannot read '${o.apiKeyFile}': ${e instanceof Error ? e.message : String(e)}`, 2);
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
      throw new StartError(`--chat-template-file: cannot read '${o.chatTemplateFile}': ${e instanceof Error ? e.message : String(e)}`, 2);
    }
  }
  const t = o.chatTemplate;
  if (t === undefined) return undefined;
  if (t in BUILTIN_TEMPLATES) return BUILTIN_TEMPLATES[t];
  if (t.includes("{{") || t.includes("{%")) return t;
  throw new StartError(`--chat-template: '${t}' is neither Jinja source nor a built-in template (${Object.keys(BUILTIN_TEMPLATES).join(", ")}); use --chat-template-file for a template in a file`, 2);
}

/** The template the flags give, checked to parse before anything starts. */
function flagTemplate(o: ServerOptions): string | undefined {
  const src = flagTemplateSource(o);
  if (src === undefined) return undefined;
  try {
    getChatTemplate(src);
  } catch (e) {
    const flag = o.chatTemplateFile !== undefined ? "--chat-template-file" : "--chat-template";
    throw new StartError(`${flag}: ${e instanceof Error ? e.message : String(e)}`, 2);
  }
  return src;
}

function formatHost(host: string): string {
  return host.includes(":") && !host.startsWith("[") ? `[${host}]` : host;
}

function envInt(env: Env, name: string, def: number): number {
  const v = env[name];
  if (v === undefined || v === "") return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0) throw new StartError(`${name}: expected a non-negative integer, got '${v}'`, 2);
  return n;
}

/** -hf / -hff as a download spec (a bad spec is a flag error). */
function hfModelSpec(o: ServerOptions): HfModelSpec {
  try {
    const { repo, tag } = parseHfRepo(o.hfRepo!);
    return { repo, tag, file: o.hfFile };
  } catch (e) {
    if (isHfError(e)) throw new StartError(e.message, 2);
    throw e;
  }
}

/** Runs the server; resolves with the exit code once it stops. */
export async function runServe(argv: string[], env: Env): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs(argv, env);
  } catch (e) {
    if (e instanceof FlagError) {
      console.error(`error: ${e.message}`);
      return 2;
    }
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
  const o = parsed.options;
  const log: Log = o.logDisable ? () => {} : (line) => console.error(line);
  try {
    return await serve(o, parsed.explicit, parsed.warnings, env, log);
  } catch (e) {
    if (e instanceof StartError) {
      console.error(`error: ${e.message}`);
      return e.exitCode;
    }
    if (e instanceof EngineOptionError) {
      console.error(`error: ${e.flag}: ${e.message}`);
      return 2;
    }
    throw e;
  }
}

async function serve(o0: ServerOptions, explicit: ReadonlySet<keyof ServerOptions>, warnings: readonly string[], env: Env, log: Log): Promise<number> {
  for (const w of warnings) log(`warn: ${w}`);
  let o = o0;
  if (o.demo) {
    if (o.model !== undefined || o.hfRepo !== undefined) throw new StartError("--demo serves the built-in demo model: leave out -m and -hf", 2);
    const { demoModelPath } = await import("../cli/demo.ts");
    try {
      o = { ...o, model: demoModelPath(), alias: o.alias.length ? o.alias : ["bloomery-demo"] };
    } catch (e) {
      throw new StartError(e instanceof Error ? e.message : String(e), 1);
    }
  }
  if (o.model === undefined && o.hfRepo === undefined) throw new StartError("no model given: pass a GGUF file with -m FNAME or a repository with -hf <user>/<model>[:quant]", 2);
  if (o.model !== undefined && !existsSync(o.model)) throw new StartError(`-m: model file '${o.model}' does not exist`, 1);
  const hfSpec = o.model === undefined && o.hfRepo !== undefined ? hfModelSpec(o) : undefined;
  const apiKeys = readApiKeys(o);
  if (o.slotSavePath !== undefined) {
    try {
      mkdirSync(o.slotSavePath, { recursive: true });
    } catch (e) {
      throw new StartError(`--slot-save-path: cannot create '${o.slotSavePath}': ${e instanceof Error ? e.message : String(e)}`, 2);
    }
  }
  const tplOverride = flagTemplate(o);
  const maxBodyBytes = envInt(env, "BLOOMERY_MAX_BODY_MB", DEFAULT_MAX_BODY_MB) * 1024 * 1024;
  const loadDelayMs = envInt(env, "BLOOMERY_TEST_LOAD_DELAY_MS", 0);
  const ctx = new ServerContext(o, apiKeys, log);

  // listen first: /health answers 503 while the model loads
  const app = buildApp(ctx, maxBodyBytes);
  const fetch = middleware(ctx, (req) => app.handle(req), { maxBodyBytes });
  const servers: Server<undefined>[] = [];
  const tcpHosts = o.hosts.filter((h) => !h.endsWith(".sock"));
  if (o.port === 0 && tcpHosts.length > 1) throw new StartError("--port 0 is not supported with more than one --host", 2);
  const idleTimeout = Math.min(255, Math.max(0, o.timeout));
  try {
    for (const host of o.hosts) {
      const common = { fetch, maxRequestBodySize: 2 * maxBodyBytes + (1 << 20), error: () => new Response("Internal Server Error", { status: 500 }) };
      const s = host.endsWith(".sock") ? Bun.serve({ ...common, unix: host }) : Bun.serve({ ...common, idleTimeout, hostname: host, port: o.port });
      servers.push(s as Server<undefined>);
      const where = host.endsWith(".sock") ? `unix://${host}` : `http://${formatHost(host)}:${s.port}`;
      log(`main: server is listening on ${where} - starting the main loop`);
    }
  } catch (e) {
    for (const s of servers) s.stop(true);
    throw new StartError(`couldn't bind HTTP server socket (${o.hosts.join(", ")}:${o.port}): ${e instanceof Error ? e.message : String(e)}`, 1);
  }
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
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    for (const s of servers) s.stop(true);
    ctx.client?.close();
    return code;
  };

  const stopCtl = new AbortController();
  void stopped.then(() => stopCtl.abort());
  try {
    let modelPath = o.model ?? "";
    if (hfSpec) {
      const h = hfOptionsFromEnv(env);
      log(`srv  load_model: resolving -hf ${o.hfRepo}${o.hfFile ? ` (file ${o.hfFile})` : ""}`);
      const got = await resolveHfModel(hfSpec, {
        offline: o.offline || h.offline,
        token: o.hfToken ?? (h.token || undefined),
        endpoint: h.endpoint,
        cacheDir: h.cacheDir,
        onProgress: o.logDisable ? undefined : defaultProgress(process.stderr),
        signal: stopCtl.signal,
      });
      modelPath = got.path;
    }
    ctx.modelPath = modelPath;
    log(`srv  load_model: loading model '${modelPath}'`);
    if (loadDelayMs > 0) await Bun.sleep(loadDelayMs);
    const gguf = GgufFile.open(modelPath);
    const arch = gguf.str("general.architecture", "");
    const nCtxTrain = arch && gguf.has(`${arch}.context_length`) ? gguf.u32(`${arch}.context_length`) : 0;
    ctx.tokenizer = Tokenizer.fromVocab(vocabFromMetadata((k) => gguf.raw(k)));
    const plan = planEngine(o, explicit, nCtxTrain);
    for (const n of plan.notes) log(n);
    const client = await Promise.race([EngineClient.start(modelPath, plan.engine), stopped.then(() => null)]);
    if (client === null) return shutdown(0);
    ctx.client = client;
    ctx.info = client.info;
    ctx.setTemplate(tplOverride, client.info.chatTemplate);
    const maxQueue = envInt(env, "BLOOMERY_MAX_QUEUE", Math.max(16, 4 * client.info.nSlots));
    ctx.admission = new Admission(client.info.nSlots, maxQueue);
    log(`srv  load_model: ${client.info.nSlots} slots, ${client.info.nCtxSlot} tokens each, ${client.info.backend} backend; chat format ${ctx.chatFormat.family}; wait queue ${maxQueue}`);
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    if (e instanceof EngineOptionError) {
      shutdown(2);
      throw e;
    }
    if (stopCtl.signal.aborted) return shutdown(0);
    log(`srv  load_model: failed to load model '${ctx.modelPath || o.hfRepo}': ${msg}`);
    log("main: exiting due to model loading error");
    return shutdown(1);
  }
  ctx.status = "ready";
  log("main: model loaded");
  await stopped;
  return shutdown(0);
}
