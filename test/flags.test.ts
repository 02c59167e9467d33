// Tests for the llama-server flag table and parser (src/cli/flags.ts and the flag-* modules).

import { describe, expect, test } from "bun:test";
import { defaultServerOptions, FlagError, parseArgs, serverHelpText, type ServerOptions } from "../src/cli/flags.ts";
import { checkTable, findFlag, parseWithTable, suggestFlag } from "../src/cli/flag-parse.ts";
import { SERVER_FLAG_TABLE } from "../src/cli/flag-table.ts";
import { FlagTableError, negatedEnv, spellings, type FlagDef, type FlagTable } from "../src/cli/flag-types.ts";
import { splitCsv } from "../src/cli/flag-values.ts";

type Env = Record<string, string | undefined>;

function opts(argv: string[], env: Env = {}): ServerOptions {
  const r = parseArgs(argv, env);
  if (r.action !== "serve") throw new Error(`expected serve, got ${r.action}`);
  return r.options;
}

function serve(argv: string[], env: Env = {}) {
  const r = parseArgs(argv, env);
  if (r.action !== "serve") throw new Error(`expected serve, got ${r.action}`);
  return r;
}

/** Runs fn, which must throw a FlagError; returns it. */
function flagError(fn: () => unknown): FlagError {
  try {
    fn();
  } catch (e) {
    if (e instanceof FlagError) return e;
    throw new Error(`expected a FlagError, got ${String(e)}`);
  }
  throw new Error("expected a FlagError, nothing was thrown");
}

function def(spelling: string): FlagDef {
  const hit = findFlag(SERVER_FLAG_TABLE, spelling);
  if (!hit) throw new Error(`no flag ${spelling}`);
  return hit.def;
}

describe("flag table", () => {
  test("the server table passes its own checks", () => {
    expect(() => checkTable(SERVER_FLAG_TABLE)).not.toThrow();
  });

  test("has llama-server's flags: more than 250 definitions in four groups", () => {
    expect(SERVER_FLAG_TABLE.flags.length).toBeGreaterThan(250);
    expect(SERVER_FLAG_TABLE.groups.map((g) => g.id)).toEqual(["common", "sampling", "spec", "server"]);
  });

  const SUPPORTED = [
    "-m", "--model", "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "--offline", "-a", "--alias", "-c", "--ctx-size",
    "-np", "--parallel", "-n", "--predict", "--n-predict", "-t", "--threads", "-tb", "--threads-batch", "-b", "--batch-size",
    "-ub", "--ubatch-size", "--host", "--port", "--api-key", "--api-key-file", "--metrics", "--slots", "--no-slots", "--props",
    "--slot-save-path", "--jinja", "--no-jinja", "--chat-template", "--chat-template-file", "--chat-template-kwargs",
    "--reasoning-format", "--reasoning-budget", "-to", "--timeout", "--cache-ram", "-cram", "-cb", "-nocb", "--cont-batching",
    "--no-cont-batching", "--mmap", "--no-mmap", "-ngl", "--gpu-layers", "--n-gpu-layers", "-fa", "--flash-attn", "-ctk",
    "--cache-type-k", "-ctv", "--cache-type-v", "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe", "-ot", "--override-tensor",
    "--fit", "-fit", "-fitt", "--fit-target", "-dev", "--device", "-ts", "--tensor-split", "-sm", "--split-mode", "-mg",
    "--main-gpu", "--seed", "-s", "--temp", "--temperature", "--top-k", "--top-p", "--min-p", "--typical", "--typical-p",
    "--repeat-penalty", "--repeat-last-n", "--presence-penalty", "--frequency-penalty", "--dry-multiplier", "--dry-base",
    "--dry-allowed-length", "--dry-penalty-last-n", "--dry-sequence-breaker", "--xtc-probability", "--xtc-threshold",
    "--samplers", "--ignore-eos", "-v", "--verbose", "--log-verbose", "--log-disable", "--warmup", "--no-warmup",
    "--cache-prompt", "--no-cache-prompt", "--cache-reuse", "--context-shift", "--no-context-shift", "-h", "--help", "--version",
  ];
  test.each(SUPPORTED)("%s is supported", (s) => {
    expect(def(s).support).toBe("supported");
  });

  const REFUSED: [string, RegExp][] = [
    ["--lora", /LoRA/],
    ["--lora-scaled", /LoRA/],
    ["-devd", /speculative/],
    ["--spec-draft-hf", /speculative/],
    ["-mm", /multimodal/],
    ["--embedding", /embeddings/],
    ["--mlock", /mlock/],
    ["--rope-scaling", /RoPE/],
    ["--ssl-key-file", /TLS/],
    ["--models-dir", /router/],
    ["--draft-max", /removed/],
    ["--gpt-oss-20b-default", /preset/],
    ["--mirostat", /Mirostat/],
  ];
  test.each(REFUSED)("%s is refused with a reason", (s, reason) => {
    const support = def(s).support;
    if (support === "supported") throw new Error(`${s} should be refused`);
    expect(support.refused).toMatch(reason);
  });

  test("every flag has help text, a group and a support state with a reason when refused", () => {
    for (const d of SERVER_FLAG_TABLE.flags) {
      expect(d.help.length).toBeGreaterThan(5);
      expect(["common", "sampling", "spec", "server"]).toContain(d.group);
      if (d.support !== "supported") expect(d.support.refused.length).toBeGreaterThan(10);
    }
  });

  test("env twins are llama's names", () => {
    expect(def("-c").env).toBe("LLAMA_ARG_CTX_SIZE");
    expect(def("-ngl").env).toBe("LLAMA_ARG_N_GPU_LAYERS");
    expect(def("--api-key").env).toBe("LLAMA_API_KEY");
    expect(def("--metrics").env).toBe("LLAMA_ARG_ENDPOINT_METRICS");
    expect(def("--reasoning-format").env).toBe("LLAMA_ARG_THINK");
    expect(def("--reasoning-budget").env).toBe("LLAMA_ARG_THINK_BUDGET");
    expect(def("-hft").env).toBe("HF_TOKEN");
    expect(def("-np").env).toBe("LLAMA_ARG_N_PARALLEL");
    expect(negatedEnv("LLAMA_ARG_MMAP")).toBe("LLAMA_ARG_NO_MMAP");
  });

  test("checkTable catches a duplicated spelling", () => {
    const bad: FlagTable = { ...SERVER_FLAG_TABLE, flags: [...SERVER_FLAG_TABLE.flags, { ...def("-c"), key: "other", default: undefined }] };
    expect(() => checkTable(bad)).toThrow(FlagTableError);
  });

  test("checkTable catches two defaults for one key, a bool without negation and an unknown group", () => {
    const base = { help: "x x x", group: "common", support: "supported" as const };
    const twoDefaults: FlagTable = {
      program: "t", groups: [{ id: "common", title: "c" }],
      flags: [
        { ...base, names: ["--a"], value: { type: "int" }, key: "k", default: 1 },
        { ...base, names: ["--b"], value: { type: "int" }, key: "k", default: 2 },
      ],
    };
    expect(() => checkTable(twoDefaults)).toThrow(/already has a default/);
    const noNeg: FlagTable = { program: "t", groups: [{ id: "common", title: "c" }], flags: [{ ...base, names: ["--a"], value: { type: "bool" }, key: "a" }] };
    expect(() => checkTable(noNeg)).toThrow(/negated/);
    const badGroup: FlagTable = { program: "t", groups: [{ id: "common", title: "c" }], flags: [{ ...base, group: "nope", names: ["--a"], value: { type: "none" }, key: "a" }] };
    expect(() => checkTable(badGroup)).toThrow(/unknown group/);
  });
});

describe("spellings", () => {
  test("single-dash multi-letter flags with separate values", () => {
    const o = opts(["-ngl", "99", "-np", "4", "-ot", "exps=CPU", "-ts", "1,1", "-cmoe", "-fa", "on", "-c", "8192", "-ub", "256"]);
    expect(o.nGpuLayers).toBe(99);
    expect(o.nParallel).toBe(4);
    expect(o.overrideTensor).toEqual([{ pattern: "exps", buffer: "CPU" }]);
    expect(o.tensorSplit).toEqual([1, 1]);
    expect(o.cpuMoe).toBe(true);
    expect(o.flashAttn).toBe("on");
    expect(o.ctxSize).toBe(8192);
    expect(o.ubatchSize).toBe(256);
  });

  test("every spelling of -ngl, with space, with = and with underscores", () => {
    for (const argv of [["-ngl", "12"], ["--gpu-layers", "12"], ["--n-gpu-layers", "12"], ["--n-gpu-layers=12"], ["-ngl=12"], ["--n_gpu_layers", "12"]]) {
      expect(opts(argv).nGpuLayers).toBe(12);
    }
  });

  test("-ngl auto | all | N and llama's negative forms", () => {
    expect(opts(["-ngl", "auto"]).nGpuLayers).toBe("auto");
    expect(opts(["-ngl", "all"]).nGpuLayers).toBe("all");
    expect(opts(["-ngl", "ALL"]).nGpuLayers).toBe("all");
    expect(opts(["-ngl", "-1"]).nGpuLayers).toBe("auto");
    expect(opts(["-ngl", "-2"]).nGpuLayers).toBe("all");
    expect(opts(["-ngl", "0"]).nGpuLayers).toBe(0);
    const e = flagError(() => parseArgs(["-ngl", "lots"], {}));
    expect(e.flag).toBe("-ngl");
    expect(e.message).toContain("lots");
  });

  test("-np N | auto, and 0 is refused as llama refuses it", () => {
    expect(opts(["--parallel=3"]).nParallel).toBe(3);
    expect(opts(["-np", "auto"]).nParallel).toBe(-1);
    const e = flagError(() => parseArgs(["-np", "0"], {}));
    expect(e.flag).toBe("-np");
    expect(e.value).toBe("0");
  });

  test("-fa on|off|auto, llama's truthy words, and a bare -fa (old spelling) means on", () => {
    expect(opts(["-fa", "off"]).flashAttn).toBe("off");
    expect(opts(["--flash-attn", "auto"]).flashAttn).toBe("auto");
    expect(opts(["-fa", "1"]).flashAttn).toBe("on");
    expect(opts(["-fa", "disabled"]).flashAttn).toBe("off");
    expect(opts(["-fa", "-1"]).flashAttn).toBe("auto");
    expect(opts(["-fa"]).flashAttn).toBe("on");
    const o = opts(["-fa", "-ngl", "7"]);
    expect(o.flashAttn).toBe("on");
    expect(o.nGpuLayers).toBe(7);
  });

  test("--fit on|off", () => {
    expect(opts(["--fit", "off"]).fit).toBe(false);
    expect(opts(["-fit", "on"]).fit).toBe(true);
    expect(opts(["--fit=false"]).fit).toBe(false);
    expect(flagError(() => parseArgs(["--fit", "maybe"], {})).flag).toBe("--fit");
  });

  test("-ot repeats append, and one value may hold a comma list", () => {
    const o = opts(["-ot", "blk\\.[0-9]\\.ffn_.*_exps=CUDA0,exps=CPU", "--override-tensor", "attn=CUDA1", "-ot=x=CPU"]);
    expect(o.overrideTensor).toEqual([
      { pattern: "blk\\.[0-9]\\.ffn_.*_exps", buffer: "CUDA0" },
      { pattern: "exps", buffer: "CPU" },
      { pattern: "attn", buffer: "CUDA1" },
      { pattern: "x", buffer: "CPU" },
    ]);
  });

  test("-ot rejects a missing buffer and a bad regular expression", () => {
    expect(flagError(() => parseArgs(["-ot", "exps"], {})).value).toBe("exps");
    expect(flagError(() => parseArgs(["-ot", "exps="], {})).flag).toBe("-ot");
    const e = flagError(() => parseArgs(["-ot", "(exps=CPU"], {}));
    expect(e.flag).toBe("-ot");
    expect(e.message).toContain("regular expression");
  });

  test("-ts and -fitt split on commas and slashes; -dev lists devices or none", () => {
    expect(opts(["-ts", "3/1"]).tensorSplit).toEqual([3, 1]);
    expect(opts(["--tensor-split", "0.5,0.25,0.25"]).tensorSplit).toEqual([0.5, 0.25, 0.25]);
    expect(opts(["-fitt", "2048"]).fitTargetMiB).toEqual([2048]);
    expect(opts(["-fitt", "512,1024"]).fitTargetMiB).toEqual([512, 1024]);
    expect(opts(["-dev", "CUDA0, CUDA1"]).devices).toEqual(["CUDA0", "CUDA1"]);
    expect(opts(["-dev", "none"]).devices).toEqual(["none"]);
    expect(flagError(() => parseArgs(["-dev", "none,CUDA0"], {})).flag).toBe("-dev");
    expect(flagError(() => parseArgs(["-ts", "1,x"], {})).value).toBe("x");
  });

  test("-sm: none and layer are supported, row is recognised and refused", () => {
    expect(opts(["-sm", "none"]).splitMode).toBe("none");
    const e = flagError(() => parseArgs(["-sm", "row"], {}));
    expect(e.flag).toBe("-sm");
    expect(e.reason).toMatch(/row/);
  });

  test("-ctk / -ctv: f16 passes, other KV types are refused with a reason, unknown types are bad values", () => {
    expect(opts(["-ctk", "f16", "-ctv", "f16"]).cacheTypeK).toBe("f16");
    const refused = flagError(() => parseArgs(["-ctv", "q8_0"], {}));
    expect(refused.flag).toBe("-ctv");
    expect(refused.value).toBe("q8_0");
    expect(refused.reason).toMatch(/f16/);
    expect(refused.message).toContain("q8_0");
    const bad = flagError(() => parseArgs(["--cache-type-k", "q9_9"], {}));
    expect(bad.reason).toBeUndefined();
    expect(bad.message).toContain("q9_9");
  });

  test("negations of llama's boolean flags", () => {
    const o = opts(["--no-mmap", "--no-jinja", "--no-slots", "--no-warmup", "-nocb", "--no-cache-prompt", "--context-shift"]);
    expect(o.loadMode).toBe("none");
    expect(o.jinja).toBe(false);
    expect(o.slots).toBe(false);
    expect(o.warmup).toBe(false);
    expect(o.contBatching).toBe(false);
    expect(o.cachePrompt).toBe(false);
    expect(o.contextShift).toBe(true);
    const back = opts(["--no-jinja", "--jinja", "--no-slots", "--slots", "--no-cont-batching", "--cont-batching", "--mmap"]);
    expect(back.jinja).toBe(true);
    expect(back.slots).toBe(true);
    expect(back.contBatching).toBe(true);
    expect(back.loadMode).toBe("mmap");
    expect(opts(["--context-shift", "--no-context-shift"]).contextShift).toBe(false);
  });

  test("a negated spelling takes no value; a positive one reads --flag=bool", () => {
    expect(flagError(() => parseArgs(["--no-mmap=1"], {})).flag).toBe("--no-mmap");
    expect(opts(["--jinja=off"]).jinja).toBe(false);
    expect(opts(["--metrics=true"]).metrics).toBe(true);
  });

  test("-lm and --mmap write the same option; the last one given wins", () => {
    expect(opts(["-lm", "none"]).loadMode).toBe("none");
    expect(opts(["-lm", "none", "--mmap"]).loadMode).toBe("mmap");
    expect(opts(["--no-mmap", "--load-mode", "auto"]).loadMode).toBe("auto");
    expect(flagError(() => parseArgs(["-lm", "mlock"], {})).reason).toMatch(/mlock/);
  });

  test("presence flags", () => {
    const o = opts(["-v", "--log-disable", "--offline", "--metrics", "--props", "--ignore-eos", "--cpu-moe"]);
    expect([o.verbose, o.logDisable, o.offline, o.metrics, o.props, o.ignoreEos, o.cpuMoe]).toEqual([true, true, true, true, true, true, true]);
    expect(opts(["--log-verbose"]).verbose).toBe(true);
    expect(opts(["--verbose"]).verbose).toBe(true);
  });

  test("model, server, template and cache flags", () => {
    const o = opts([
      "-m", "Qwen3-30B-A3B-Q4_K_M.gguf", "-a", "qwen, qwen3", "--alias", "qwen3,local", "--host", "0.0.0.0", "--port", "0",
      "-to", "30", "--slot-save-path", "/tmp/slots", "--cache-ram", "0", "--cache-reuse", "256", "--reasoning-format", "deepseek",
      "--reasoning-budget", "0", "--chat-template", "chatml", "-t", "8", "-tb", "16", "-b", "1024", "-n", "128", "--seed", "42",
      "-mg", "1", "-ncmoe", "12", "--api-key-file", "keys.txt",
    ]);
    expect(o.model).toBe("Qwen3-30B-A3B-Q4_K_M.gguf");
    expect(o.alias).toEqual(["qwen", "qwen3", "local"]);
    expect(o.host).toBe("0.0.0.0");
    expect(o.port).toBe(0);
    expect(o.timeout).toBe(30);
    expect(o.slotSavePath).toBe("/tmp/slots");
    expect(o.cacheRamMiB).toBe(0);
    expect(o.cacheReuse).toBe(256);
    expect(o.reasoningFormat).toBe("deepseek");
    expect(o.reasoningBudget).toBe(0);
    expect(o.chatTemplate).toBe("chatml");
    expect([o.threads, o.threadsBatch, o.batchSize, o.nPredict, o.seed, o.mainGpu, o.nCpuMoe]).toEqual([8, 16, 1024, 128, 42, 1, 12]);
    expect(o.apiKeyFile).toBe("keys.txt");
  });

  test("-hf with -hff and -hft", () => {
    const o = opts(["-hf", "unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M", "-hff", "x.gguf", "-hft", "hf_abc"]);
    expect(o.hfRepo).toBe("unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M");
    expect(o.hfFile).toBe("x.gguf");
    expect(o.hfToken).toBe("hf_abc");
    expect(opts(["-hfr", "a/b"]).hfRepo).toBe("a/b");
    expect(flagError(() => parseArgs(["-hff", "x.gguf"], {})).flag).toBe("--hf-file");
  });

  test("--host takes comma-separated addresses; an empty one is an error", () => {
    const o = opts(["--host", "127.0.0.1, ::1"]);
    expect(o.hosts).toEqual(["127.0.0.1", "::1"]);
    expect(o.host).toBe("127.0.0.1");
    expect(flagError(() => parseArgs(["--host", " , "], {})).flag).toBe("--host");
  });

  test("--api-key: comma lists with CSV quotes, repeats append", () => {
    expect(opts(["--api-key", 'k1,"k,2"', "--api-key", "k3"]).apiKeys).toEqual(["k1", "k,2", "k3"]);
    expect(splitCsv('a,"b ""c""",d')).toEqual(["a", 'b "c"', "d"]);
  });

  test("--chat-template-kwargs takes a JSON object; repeats merge", () => {
    const o = opts(["--chat-template-kwargs", '{"enable_thinking":false,"a":1}', "--chat-template-kwargs", '{"a":2}']);
    expect(o.chatTemplateKwargs).toEqual({ enable_thinking: false, a: 2 });
    expect(flagError(() => parseArgs(["--chat-template-kwargs", "[1]"], {})).flag).toBe("--chat-template-kwargs");
    expect(flagError(() => parseArgs(["--chat-template-kwargs", "{oops"], {})).value).toBe("{oops");
  });

  test("--chat-template and --chat-template-file together are an error", () => {
    expect(flagError(() => parseArgs(["--chat-template", "chatml", "--chat-template-file", "t.jinja"], {})).message).toContain("--chat-template");
  });

  test("sampling defaults from flags", () => {
    const o = opts([
      "--temp", "0.7", "--top-k", "20", "--top-p", "0.8", "--min-p", "0", "--typical-p", "0.9", "--repeat-penalty", "1.1",
      "--repeat-last-n", "128", "--presence-penalty", "1.5", "--frequency-penalty", "0.2", "--dry-multiplier", "0.8",
      "--dry-base", "2", "--dry-allowed-length", "3", "--dry-penalty-last-n", "-1", "--xtc-probability", "0.5",
      "--xtc-threshold", "0.2",
    ]);
    expect([o.temperature, o.topK, o.topP, o.minP, o.typicalP, o.repeatPenalty, o.repeatLastN]).toEqual([0.7, 20, 0.8, 0, 0.9, 1.1, 128]);
    expect([o.presencePenalty, o.frequencyPenalty, o.dryMultiplier, o.dryBase, o.dryAllowedLength, o.dryPenaltyLastN]).toEqual([1.5, 0.2, 0.8, 2, 3, -1]);
    expect([o.xtcProbability, o.xtcThreshold]).toEqual([0.5, 0.2]);
    expect(opts(["--temperature=.5"]).temperature).toBe(0.5);
    expect(opts(["--temp", "-1"]).temperature).toBe(0);
    expect(opts(["--temp", "1e-1"]).temperature).toBe(0.1);
  });

  test("sampling values llama rejects are errors", () => {
    expect(flagError(() => parseArgs(["--temp", "warm"], {})).value).toBe("warm");
    expect(flagError(() => parseArgs(["--repeat-penalty", "0"], {})).flag).toBe("--repeat-penalty");
    expect(flagError(() => parseArgs(["--repeat-last-n", "-1"], {})).flag).toBe("--repeat-last-n");
    expect(flagError(() => parseArgs(["--dry-base", "0.5"], {})).flag).toBe("--dry-base");
    expect(flagError(() => parseArgs(["--seed", "4294967296"], {})).flag).toBe("--seed");
    expect(opts(["--seed", "4294967295"]).seed).toBe(4294967295);
  });

  test("--samplers: ';' lists, llama's other spellings, unknown and refused names", () => {
    expect(opts(["--samplers", "top_k;temperature"]).samplers).toEqual(["top_k", "temperature"]);
    expect(opts(["--samplers", "top-k;TopP;nucleus;temp;typ;minp"]).samplers).toEqual(["top_k", "top_p", "top_p", "temperature", "typ_p", "min_p"]);
    expect(flagError(() => parseArgs(["--samplers", "top_k;magic"], {})).value).toBe("magic");
    expect(flagError(() => parseArgs(["--samplers", "infill"], {})).reason).toMatch(/infill/);
  });

  test("--dry-sequence-breaker: the first replaces the defaults, more append, none clears", () => {
    expect(opts(["--dry-sequence-breaker", "\n\n", "--dry-sequence-breaker", "###"]).drySequenceBreakers).toEqual(["\n\n", "###"]);
    expect(opts(["--dry-sequence-breaker", "none"]).drySequenceBreakers).toEqual([]);
  });

  test("typed values: errors name the flag and the bad value", () => {
    const c = flagError(() => parseArgs(["-c", "abc"], {}));
    expect(c.flag).toBe("-c");
    expect(c.value).toBe("abc");
    expect(c.message).toContain("-c");
    expect(c.message).toContain("abc");
    const fa = flagError(() => parseArgs(["-fa", "maybe"], {}));
    expect(fa.flag).toBe("-fa");
    expect(fa.value).toBe("maybe");
    expect(fa.message).toContain("maybe");
    expect(flagError(() => parseArgs(["-c", "-5"], {})).flag).toBe("-c");
    expect(flagError(() => parseArgs(["-c", "4096.5"], {})).value).toBe("4096.5");
    for (const loose of ["0x10", "1e3", "12 ", "4k"]) expect(flagError(() => parseArgs(["-c", loose], {})).value).toBe(loose);
    expect(flagError(() => parseArgs(["-c", "99999999999"], {})).flag).toBe("-c");
    expect(flagError(() => parseArgs(["--port", "70000"], {})).flag).toBe("--port");
    expect(flagError(() => parseArgs(["--reasoning-format", "bogus"], {})).flag).toBe("--reasoning-format");
  });

  test("a value flag at the end is missing its value", () => {
    const e = flagError(() => parseArgs(["-m", "x.gguf", "-c"], {}));
    expect(e.flag).toBe("-c");
    expect(e.message).toContain("missing value");
  });

  test("a value may start with '-' (llama takes the next token)", () => {
    expect(opts(["-n", "-1"]).nPredict).toBe(-1);
    expect(opts(["--reasoning-budget", "-1"]).reasoningBudget).toBe(-1);
  });

  test("arguments that are not flags are errors", () => {
    const e = flagError(() => parseArgs(["model.gguf"], {}));
    expect(e.flag).toBe("model.gguf");
    expect(e.message).toContain("-m model.gguf");
    expect(flagError(() => parseArgs(["-c", "1", "--", "x"], {})).flag).toBe("x");
  });

  test("a repeated last-wins flag keeps the last value and warns", () => {
    const r = serve(["-c", "1024", "--ctx-size", "2048"]);
    expect(r.options.ctxSize).toBe(2048);
    expect(r.warnings.join("\n")).toContain("--ctx-size");
  });
});

describe("environment twins", () => {
  test("a variable applies when its flag is absent", () => {
    const r = serve([], { LLAMA_ARG_CTX_SIZE: "4096", LLAMA_ARG_N_GPU_LAYERS: "all", LLAMA_ARG_HOST: "0.0.0.0", LLAMA_ARG_PORT: "9000", LLAMA_ARG_MODEL: "m.gguf" });
    expect(r.options.ctxSize).toBe(4096);
    expect(r.options.nGpuLayers).toBe("all");
    expect(r.options.host).toBe("0.0.0.0");
    expect(r.options.port).toBe(9000);
    expect(r.options.model).toBe("m.gguf");
    expect(r.origins.ctxSize).toBe("env");
    expect(r.explicit.has("ctxSize")).toBe(true);
    expect(r.explicit.has("batchSize")).toBe(false);
  });

  test("a flag beats its variable, with a warning", () => {
    const r = serve(["-c", "2048"], { LLAMA_ARG_CTX_SIZE: "4096" });
    expect(r.options.ctxSize).toBe(2048);
    expect(r.origins.ctxSize).toBe("argv");
    expect(r.warnings.join("\n")).toContain("LLAMA_ARG_CTX_SIZE");
    expect(opts(["-ot", "a=CPU"], { LLAMA_ARG_OVERRIDE_TENSOR: "b=CUDA0" }).overrideTensor).toEqual([{ pattern: "a", buffer: "CPU" }]);
  });

  test("a flag beats the variable of another flag writing the same option", () => {
    expect(opts(["--no-mmap"], { LLAMA_ARG_LOAD_MODE: "mmap" }).loadMode).toBe("none");
  });

  test("boolean variables read llama's words", () => {
    for (const v of ["1", "true", "on", "enabled", "TRUE"]) expect(opts([], { LLAMA_ARG_CONTEXT_SHIFT: v }).contextShift).toBe(true);
    for (const v of ["0", "false", "off", "disabled"]) expect(opts([], { LLAMA_ARG_JINJA: v }).jinja).toBe(false);
    expect(opts([], { LLAMA_ARG_MMAP: "0" }).loadMode).toBe("none");
    expect(opts([], { LLAMA_ARG_MMAP: "1" }).loadMode).toBe("mmap");
    const e = flagError(() => parseArgs([], { LLAMA_ARG_JINJA: "sometimes" }));
    expect(e.env).toBe("LLAMA_ARG_JINJA");
    expect(e.message).toContain("LLAMA_ARG_JINJA");
    expect(e.message).toContain("sometimes");
  });

  test("the LLAMA_ARG_NO_* form of a negatable flag means off", () => {
    expect(opts([], { LLAMA_ARG_NO_MMAP: "1" }).loadMode).toBe("none");
    expect(opts([], { LLAMA_ARG_NO_CONT_BATCHING: "" }).contBatching).toBe(false);
    expect(opts([], { LLAMA_ARG_NO_ENDPOINT_SLOTS: "1" }).slots).toBe(false);
  });

  test("presence flags from the environment: truthy sets, falsey leaves unset, anything else is an error", () => {
    expect(opts([], { LLAMA_ARG_CPU_MOE: "1" }).cpuMoe).toBe(true);
    expect(opts([], { LLAMA_ARG_CPU_MOE: "0" }).cpuMoe).toBe(false);
    expect(opts([], { LLAMA_ARG_ENDPOINT_METRICS: "true" }).metrics).toBe(true);
    expect(opts([], { LLAMA_ARG_OFFLINE: "on" }).offline).toBe(true);
    expect(flagError(() => parseArgs([], { LLAMA_ARG_CPU_MOE: "yes" })).env).toBe("LLAMA_ARG_CPU_MOE");
  });

  test("typed variables: values parse as on the command line, errors name the variable", () => {
    expect(opts([], { LLAMA_ARG_FLASH_ATTN: "off", LLAMA_ARG_FIT: "disabled", LLAMA_ARG_TEMPERATURE: "0.3" })).toMatchObject({
      flashAttn: "off",
      fit: false,
      temperature: 0.3,
    });
    expect(opts([], { LLAMA_ARG_OVERRIDE_TENSOR: "exps=CPU,attn=CUDA0" }).overrideTensor).toHaveLength(2);
    expect(opts([], { LLAMA_API_KEY: "k1,k2" }).apiKeys).toEqual(["k1", "k2"]);
    expect(opts([], { HF_TOKEN: "hf_x" }).hfToken).toBe("hf_x");
    const e = flagError(() => parseArgs([], { LLAMA_ARG_CTX_SIZE: "abc" }));
    expect(e.flag).toBe("-c");
    expect(e.env).toBe("LLAMA_ARG_CTX_SIZE");
    expect(e.value).toBe("abc");
    expect(e.message).toContain("LLAMA_ARG_CTX_SIZE");
  });

  test("an empty variable counts as unset", () => {
    expect(opts([], { LLAMA_ARG_CTX_SIZE: "" }).ctxSize).toBe(0);
    expect(serve([], { LLAMA_ARG_CTX_SIZE: "" }).explicit.size).toBe(0);
  });

  test("a refused flag's variable is refused, except a value that matches what bloomery does", () => {
    const e = flagError(() => parseArgs([], { LLAMA_ARG_MMPROJ: "proj.gguf" }));
    expect(e.env).toBe("LLAMA_ARG_MMPROJ");
    expect(e.reason).toMatch(/multimodal/);
    expect(() => parseArgs([], { LLAMA_ARG_UI_MCP_PROXY: "0" })).not.toThrow();
    expect(flagError(() => parseArgs([], { LLAMA_ARG_UI_MCP_PROXY: "1" })).env).toBe("LLAMA_ARG_UI_MCP_PROXY");
    expect(() => parseArgs([], { LLAMA_ARG_EMBEDDINGS: "0" })).not.toThrow();
    expect(flagError(() => parseArgs([], { LLAMA_ARG_EMBEDDINGS: "1" })).reason).toMatch(/embeddings/);
  });
});

describe("refused and unknown flags", () => {
  test("a refused flag names itself and its reason", () => {
    const e = flagError(() => parseArgs(["-m", "x.gguf", "--lora", "adapter.gguf"], {}));
    expect(e.flag).toBe("--lora");
    expect(e.reason).toBe("LoRA adapters are not supported yet");
    expect(e.message).toContain("--lora");
    expect(e.message).toContain("LoRA adapters are not supported yet");
    expect(flagError(() => parseArgs(["--lora=a.gguf"], {})).flag).toBe("--lora");
    expect(flagError(() => parseArgs(["--lora"], {})).reason).toMatch(/LoRA/);
    expect(flagError(() => parseArgs(["-devd", "CUDA1"], {})).reason).toMatch(/speculative/);
    expect(flagError(() => parseArgs(["--mlock"], {})).flag).toBe("--mlock");
    expect(flagError(() => parseArgs(["--control-vector-layer-range", "1", "2"], {})).flag).toBe("--control-vector-layer-range");
  });

  test("turning off a feature bloomery lacks is accepted", () => {
    expect(() => parseArgs(["--no-webui", "--no-mmproj", "--no-ui-mcp-proxy", "--no-agent"], {})).not.toThrow();
    expect(flagError(() => parseArgs(["--ui-mcp-proxy"], {})).flag).toBe("--ui-mcp-proxy");
    expect(flagError(() => parseArgs(["--mmproj-auto"], {})).flag).toBe("--mmproj-auto");
  });

  test("an unknown flag names itself and suggests the closest spelling", () => {
    const e = flagError(() => parseArgs(["--ctx-szie", "4096"], {}));
    expect(e.flag).toBe("--ctx-szie");
    expect(e.message).toContain("did you mean --ctx-size?");
    expect(flagError(() => parseArgs(["-ngll", "5"], {})).message).toContain("-ngl");
    expect(flagError(() => parseArgs(["--no-jinj"], {})).message).toContain("--no-jinja");
    const far = flagError(() => parseArgs(["--qqqqqqqqqqqqqqqqqq"], {}));
    expect(far.flag).toBe("--qqqqqqqqqqqqqqqqqq");
    expect(far.message).not.toContain("did you mean");
    expect(flagError(() => parseArgs(["--bogus=3"], {})).flag).toBe("--bogus");
    expect(suggestFlag(SERVER_FLAG_TABLE, "--n-gpu-layer")).toBe("--n-gpu-layers");
  });

  test("llama-cli flags that llama-server does not take are unknown", () => {
    expect(flagError(() => parseArgs(["-cnv"], {})).message).toContain("unknown flag");
    expect(flagError(() => parseArgs(["--interactive"], {})).flag).toBe("--interactive");
  });
});

describe("help and version", () => {
  test("-h, --help and --usage give help; it stops parsing there", () => {
    for (const argv of [["-h"], ["--help"], ["--usage"], ["-m", "x.gguf", "--help", "--lora", "x"]]) {
      expect(parseArgs(argv, {}).action).toBe("help");
    }
  });

  test("--version", () => {
    expect(parseArgs(["--version"], {})).toEqual({ action: "version" });
  });

  test("help lists every spelling of every flag, every env twin, grouped as llama groups them", () => {
    const r = parseArgs(["--help"], {});
    if (r.action !== "help") throw new Error("no help");
    const text = r.text;
    expect(text).toBe(serverHelpText());
    for (const d of SERVER_FLAG_TABLE.flags) {
      for (const s of spellings(d)) expect(text).toMatch(new RegExp(`(^|[\\s,/])${s.replace(/[.+]/g, "\\$&")}(,|/|\\s|$)`, "m"));
      if (d.env && d.support === "supported") expect(text).toContain(`(env: ${d.env})`);
    }
    const sections = ["----- common params -----", "----- sampling params -----", "----- speculative params -----", "----- server-specific params -----"];
    const at = sections.map((s) => text.indexOf(s));
    expect(at.every((i) => i >= 0)).toBe(true);
    expect([...at].sort((a, b) => a - b)).toEqual(at);
    expect(text.indexOf("--temp")).toBeGreaterThan(at[1]);
    expect(text.indexOf("--port")).toBeGreaterThan(at[3]);
  });

  test("help shows defaults and refusals", () => {
    const text = serverHelpText();
    const portLine = text.slice(text.indexOf("--port PORT"), text.indexOf("--port PORT") + 200);
    expect(portLine).toContain("(default: 8080)");
    expect(text).toContain("penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature)");
    expect(text).toContain("LoRA adapters are not supported yet:\n    --lora, --lora-scaled, --lora-init-without-apply\n");
    expect(text).toContain("-ngl,  --gpu-layers, --n-gpu-layers N");
    expect(text).toContain("--mmap, --no-mmap");
  });
});

describe("help's layout", () => {
  const text = serverHelpText();
  const end = text.indexOf("----- not supported yet (");

  test("the subcommands are listed first, each with what it does", () => {
    for (const sub of ["generate -m FILE", "bench -m FILE", "synth MODEL[:QUANT] -o FILE", "perplexity -m FILE -f TEXT", "version"]) expect(text.indexOf(`\n  ${sub}`)).toBeGreaterThan(0);
    expect(text.indexOf("subcommands:")).toBeLessThan(text.indexOf("----- common params -----"));
    expect(text).toContain("bloomery-serve --recommend [--json]");
  });

  test("the refused flags are listed once, at the end, under their reasons; no note under a supported flag", () => {
    const refused = SERVER_FLAG_TABLE.flags.filter((d) => d.support !== "supported");
    expect(end).toBeGreaterThan(0);
    expect(text).toContain(`----- not supported yet (${refused.length} flags of llama's, recognised and refused by name with the reason) -----`);
    expect(text.slice(0, end)).not.toContain("not supported");
    const tail = text.slice(end);
    for (const d of refused) {
      const entry = spellings(d).join("/");
      expect(tail.split(/,\s+|\n\s*/).filter((e) => e === entry || e.startsWith(`${entry} (`)).length).toBe(1);
      expect(text.slice(0, end)).not.toMatch(new RegExp(`^${d.names[0].replace(/[.+]/g, "\\$&")}[ ,]`, "m"));
    }
    const flat = tail.replace(/\s+/g, " ");
    for (const reason of new Set(refused.map((d) => (d.support as { refused: string }).refused))) expect(flat.split(`${reason}:`).length).toBe(2);
    // a refused flag whose "off" spelling is accepted says so
    expect(tail).toContain("--mmproj-auto/--no-mmproj/--no-mmproj-auto (--no-mmproj is accepted: bloomery does that anyway)");
  });

  test("it is half as long as it was (839 lines, 185 of them notes)", () => {
    expect(text.split("\n").length).toBeLessThan(475); // 450 before the nine speculative flags became supported
  });
});

describe("defaults", () => {
  const expected: Partial<ServerOptions> = {
    model: undefined, hfRepo: undefined, offline: false, alias: [], loadMode: "auto",
    ctxSize: 0, nParallel: -1, nPredict: -1, threads: -1, threadsBatch: -1, batchSize: 2048, ubatchSize: 512,
    contBatching: true, flashAttn: "auto", cacheTypeK: "f16", cacheTypeV: "f16", contextShift: false, cachePrompt: true,
    cacheReuse: 0, cacheRamMiB: 8192, warmup: true,
    nGpuLayers: "auto", devices: [], tensorSplit: [], splitMode: "layer", mainGpu: 0, cpuMoe: false, nCpuMoe: 0,
    overrideTensor: [], fit: true, fitTargetMiB: [1024],
    jinja: true, chatTemplate: undefined, chatTemplateKwargs: {}, reasoningFormat: "auto", reasoningBudget: -1,
    host: "127.0.0.1", hosts: ["127.0.0.1"], port: 8080, apiKeys: [], apiKeyFile: undefined, timeout: 3600,
    metrics: false, slots: true, props: false, slotSavePath: undefined,
    seed: -1, temperature: 0.8, topK: 40, topP: 0.95, minP: 0.05, typicalP: 1, repeatPenalty: 1, repeatLastN: 64,
    presencePenalty: 0, frequencyPenalty: 0, dryMultiplier: 0, dryBase: 1.75, dryAllowedLength: 2, dryPenaltyLastN: 64,
    drySequenceBreakers: ["\n", ":", '"', "*"], xtcProbability: 0, xtcThreshold: 0.1,
    samplers: ["penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature"],
    ignoreEos: false, verbose: false, logDisable: false,
  };

  test("a bare command line gets llama-server's defaults", () => {
    const r = serve([], {});
    expect(r.options).toMatchObject(expected);
    expect(r.explicit.size).toBe(0);
    expect(r.warnings).toEqual([]);
    expect(defaultServerOptions()).toEqual(r.options);
  });

  test("unrelated environment variables change nothing", () => {
    expect(opts([], { PATH: "/usr/bin", HOME: "/root", LLAMA_ARG_UNKNOWN_THING: "1" })).toEqual(defaultServerOptions());
  });

  test("every ServerOptions key is present", () => {
    const o = defaultServerOptions();
    for (const key of Object.keys(expected)) expect(key in o).toBe(true);
  });
});

describe("generic machinery: a llama-bench style table", () => {
  const G = "bench";
  const base = { group: G, support: "supported" as const, help: "test flag" };
  const BENCH: FlagTable = {
    program: "bench",
    groups: [{ id: G, title: "bench params" }],
    flags: [
      { ...base, names: ["-m", "--model"], key: "model", value: { type: "list", of: { type: "string", nonEmpty: true }, split: "," }, repeat: "append", default: [] },
      { ...base, names: ["-p", "--n-prompt"], key: "nPrompt", value: { type: "list", of: { type: "range" }, split: "," }, repeat: "append", default: [512] },
      { ...base, names: ["-n", "--n-gen"], key: "nGen", value: { type: "list", of: { type: "range" }, split: "," }, repeat: "append", default: [128] },
      { ...base, names: ["-d", "--n-depth"], key: "nDepth", value: { type: "list", of: { type: "range" }, split: "," }, repeat: "append", default: [0] },
      { ...base, names: ["-r", "--repetitions"], key: "reps", value: { type: "int", min: 1 }, default: 5 },
      { ...base, names: ["-t", "--threads"], key: "threads", value: { type: "list", of: { type: "range" }, split: "," }, repeat: "append" },
      { ...base, names: ["-ngl", "--n-gpu-layers"], key: "ngl", value: { type: "list", of: { type: "range", allowNegative: true }, split: "," }, repeat: "append", default: [99] },
      { ...base, names: ["-fa", "--flash-attn"], key: "fa", value: { type: "list", of: { type: "toggle" }, split: "," }, repeat: "append", default: [false] },
      { ...base, names: ["-o", "--output"], key: "output", value: { type: "enum", values: ["csv", "json", "jsonl", "md", "sql"] }, default: "md" },
    ],
  };

  test("the bench table passes the checks", () => {
    expect(() => checkTable(BENCH)).not.toThrow();
  });

  test("comma lists mean several test values; repeats append; ranges expand", () => {
    const r = parseWithTable(BENCH, ["-m", "a.gguf,b.gguf", "-p", "512,1024", "-p", "2048", "-n", "16-64*2", "-d", "0-2048+1024", "-ngl", "-1,0,99", "-fa", "0,1", "-r", "3", "-o", "json"], {});
    expect(r.values).toMatchObject({
      model: ["a.gguf", "b.gguf"],
      nPrompt: [512, 1024, 2048],
      nGen: [16, 32, 64],
      nDepth: [0, 1024, 2048],
      ngl: [-1, 0, 99],
      fa: [false, true],
      reps: 3,
      output: "json",
    });
    expect(r.values.threads).toBeUndefined();
  });

  test("defaults when nothing is given", () => {
    const r = parseWithTable(BENCH, [], {});
    expect(r.values).toMatchObject({ nPrompt: [512], nGen: [128], reps: 5, output: "md", fa: [false] });
  });

  test("bad ranges and values are errors naming the flag", () => {
    expect(() => parseWithTable(BENCH, ["-p", "1-8+0"], {})).toThrow(FlagError);
    expect(flagError(() => parseWithTable(BENCH, ["-p", "-5"], {})).flag).toBe("-p");
    expect(flagError(() => parseWithTable(BENCH, ["-n", "x"], {})).value).toBe("x");
    expect(flagError(() => parseWithTable(BENCH, ["-o", "xml"], {})).message).toContain("csv, json, jsonl, md, sql");
    expect(flagError(() => parseWithTable(BENCH, ["-r", "0"], {})).flag).toBe("-r");
  });

  test("positionals only when the caller allows them", () => {
    expect(flagError(() => parseWithTable(BENCH, ["extra"], {})).flag).toBe("extra");
    expect(parseWithTable(BENCH, ["extra", "-r", "2"], {}, { allowPositionals: true }).positionals).toEqual(["extra"]);
  });
});
