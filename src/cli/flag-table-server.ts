// llama-server's own flags (llama.cpp common/arg.cpp, "server-specific params"): slots, caches, HTTP, keys, templates.

import { refuse } from "./flag-define.ts";
import type { FlagDef, FlagValue } from "./flag-types.ts";

const G = "server";

const LOOKUP = "lookup decoding is not supported yet";
const CHECKPOINTS = "context checkpoints are not supported yet";
const MULTIMODAL = "multimodal projectors (images, audio, video) are not supported yet";
const EMBED = "embeddings and reranking are not supported yet";
const UI_CONFIG = "web UI defaults from the command line are not supported yet; the UI keeps its settings in the browser";
const UI_MCP = "the web UI has no MCP client, so it needs no MCP proxy";
const AGENT = "built-in agent tools and MCP servers are not part of bloomery";
const ROUTER = "router mode (several models behind one server) is not supported";
const PRESET = "preset model shortcuts are not supported; use -hf <user>/<model>[:quant]";

function notZero(v: FlagValue): string | undefined {
  return v === 0 ? "a slot count of at least 1, or -1 / auto" : undefined;
}

function nonEmptyList(v: FlagValue): string | undefined {
  return Array.isArray(v) && v.length === 0 ? "at least one address" : undefined;
}

export const SERVER_SPECIFIC_FLAGS: readonly FlagDef[] = [
  refuse(G, ["-lcs", "--lookup-cache-static"], LOOKUP, "static lookup cache for lookup decoding", { hint: "FNAME" }),
  refuse(G, ["-lcd", "--lookup-cache-dynamic"], LOOKUP, "dynamic lookup cache for lookup decoding", { hint: "FNAME" }),
  refuse(G, ["--kv-unified-per-slot"], "per-slot limits on a unified KV cache are not supported yet", "context limit per slot of a unified KV cache", { hint: "N", env: "LLAMA_ARG_KV_UNIFIED_PER_SLOT" }),
  refuse(G, ["-ctxcp", "--ctx-checkpoints", "--swa-checkpoints"], CHECKPOINTS, "most context checkpoints kept per slot", { hint: "N", env: "LLAMA_ARG_CTX_CHECKPOINTS", default: 32 }),
  refuse(G, ["-cms", "--checkpoint-min-step"], CHECKPOINTS, "fewest tokens between context checkpoints", { hint: "N", env: "LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", default: 8192 }),
  {
    names: ["-cram", "--cache-ram"], value: { type: "int", min: -1 }, hint: "N", env: "LLAMA_ARG_CACHE_RAM", key: "cacheRamMiB", default: 8192,
    help: "most host memory (MiB) the prompt cache may use (-1 = no limit, 0 = off)", group: G, support: "supported",
  },
  refuse(G, ["-kvu", "--kv-unified"], "unified KV buffer control is not supported yet", "one KV buffer shared by all slots", { neg: ["-no-kvu", "--no-kv-unified"], env: "LLAMA_ARG_KV_UNIFIED" }),
  refuse(G, ["--cache-idle-slots"], "idle-slot caching control is not supported yet", "save idle slots to the prompt cache when a new task starts", { neg: ["--no-cache-idle-slots"], env: "LLAMA_ARG_CACHE_IDLE_SLOTS" }),
  {
    names: ["--context-shift"], negNames: ["--no-context-shift"], value: { type: "bool" }, env: "LLAMA_ARG_CONTEXT_SHIFT", key: "contextShift",
    default: false, help: "drop old tokens when a generation outgrows the context, instead of stopping", group: G, support: "supported",
  },
  refuse(G, ["-r", "--reverse-prompt"], 'a server-wide stop string is not supported; send "stop" with each request', "stop generating at this text", { hint: "PROMPT" }),
  refuse(G, ["-sp", "--special"], "printing special tokens is not supported yet", "print special tokens in the output"),
  {
    names: ["--warmup"], negNames: ["--no-warmup"], value: { type: "bool" }, key: "warmup", default: true,
    help: "run one empty pass after loading so the first request is fast", group: G, support: "supported",
  },
  refuse(G, ["--spm-infill"], "infill is not supported yet", "use the suffix/prefix/middle order for infill"),
  refuse(G, ["--pooling"], EMBED, "embedding pooling: none, mean, cls, last or rank", { hint: "{none,mean,cls,last,rank}", env: "LLAMA_ARG_POOLING" }),
  {
    names: ["-np", "--parallel"], value: { type: "int", min: -1, keywords: { auto: -1 } }, hint: "N", env: "LLAMA_ARG_N_PARALLEL",
    key: "nParallel", default: -1, defaultText: "-1, auto", check: notZero,
    help: "number of slots, requests served at once. With N, each slot gets -c divided by N (as llama-server splits it). With auto (-1), " +
      "each slot gets --slot-ctx, else the whole -c; with -c 0 (or none) the slots share the model's training context (or what fits), " +
      "each holding at least 32,768 tokens (a coding agent's first turn) or all of a shorter context, which up to 4 slots then each hold; " +
      "the count is the most slots, up to 8, whose f16 KV cache fits beside the weights the plan puts there " +
      "in the card's free memory (or beside the weights and --cache-ram in the host's usable RAM)",
    group: G, support: "supported",
  },
  {
    names: ["--slot-ctx"], value: { type: "int", min: 0 }, hint: "N", env: "BLOOMERY_SLOT_CTX", key: "slotCtx", default: 0, defaultText: "0, from -c",
    help: "bloomery's own: tokens each slot holds; the whole context is N x the slots. A -c given too must agree: with -np K it must be " +
      "K x N, with -np auto it must be N (both then give each slot's context); otherwise the start is refused naming both",
    group: G, support: "supported",
  },
  {
    names: ["-cb", "--cont-batching"], negNames: ["-nocb", "--no-cont-batching"], value: { type: "bool" }, env: "LLAMA_ARG_CONT_BATCHING",
    key: "contBatching", default: true, help: "continuous batching: new requests join the running batch", group: G, support: "supported",
  },
  refuse(G, ["--mmproj-auto"], MULTIMODAL, "use the repository's multimodal projector when -hf finds one", {
    neg: ["--no-mmproj", "--no-mmproj-auto"], env: "LLAMA_ARG_MMPROJ_AUTO", accepts: false,
  }),
  refuse(G, ["--mtmd-batch-max-tokens"], MULTIMODAL, "most image tokens encoded per batch", { hint: "N", env: "LLAMA_ARG_MTMD_BATCH_MAX_TOKENS" }),
  {
    names: ["-a", "--alias"], hint: "STRING", env: "LLAMA_ARG_ALIAS", key: "alias", default: [], repeat: "append",
    value: { type: "list", of: { type: "string" }, split: ",", trim: true, dropEmpty: true },
    help: "model names the API answers to, comma-separated (default: the file name)", group: G, support: "supported",
  },
  {
    names: ["--tags"], hint: "STRING", env: "LLAMA_ARG_TAGS", key: "tags", default: [],
    value: { type: "list", of: { type: "string" }, split: ",", trim: true, dropEmpty: true },
    help: "model tags, comma-separated (informational: /v1/models lists them)", group: G, support: "supported",
  },
  refuse(G, ["--embd-normalize"], EMBED, "embedding normalisation (-1 none, 0 max abs, 1 taxicab, 2 euclidean, >2 p-norm)", { hint: "N", default: 2 }),
  {
    names: ["--host"], hint: "HOST", env: "LLAMA_ARG_HOST", key: "hosts", default: ["127.0.0.1"], check: nonEmptyList,
    value: { type: "list", of: { type: "string" }, split: "csv", trim: true, dropEmpty: true },
    help: "addresses to listen on, comma-separated", group: G, support: "supported",
  },
  {
    names: ["--port"], value: { type: "int", min: 0, max: 65535 }, hint: "PORT", env: "LLAMA_ARG_PORT", key: "port", default: 8080,
    help: "TCP port to listen on (0 = any free port)", group: G, support: "supported",
  },
  refuse(G, ["--reuse-port"], "SO_REUSEPORT is not supported yet", "let several sockets bind the same port", { env: "LLAMA_ARG_REUSE_PORT" }),
  {
    names: ["--path"], value: { type: "string", nonEmpty: true }, hint: "PATH", env: "LLAMA_ARG_STATIC_PATH", key: "staticPath",
    help: "directory of static files served at / instead of the built-in web UI (as llama-server: index.html for a directory)", group: G, support: "supported",
  },
  {
    names: ["--cors-origins"], value: { type: "string", nonEmpty: true }, hint: "ORIGINS", env: "LLAMA_ARG_CORS_ORIGINS", key: "corsOrigins", default: "*",
    help: "allowed CORS origins, comma-separated; 'localhost' reflects the Origin only when it is this machine", group: G, support: "supported",
  },
  {
    names: ["--cors-methods"], value: { type: "string", nonEmpty: true }, hint: "METHODS", env: "LLAMA_ARG_CORS_METHODS", key: "corsMethods", default: "GET, POST, DELETE, OPTIONS",
    help: "allowed CORS methods, comma-separated", group: G, support: "supported",
  },
  {
    names: ["--cors-headers"], value: { type: "string", nonEmpty: true }, hint: "HEADERS", env: "LLAMA_ARG_CORS_HEADERS", key: "corsHeaders", default: "*",
    help: "allowed CORS headers, comma-separated", group: G, support: "supported",
  },
  {
    names: ["--cors-credentials"], negNames: ["--no-cors-credentials"], value: { type: "bool" }, env: "LLAMA_ARG_CORS_CREDENTIALS", key: "corsCredentials", default: true,
    help: "allow credentials in CORS requests (with --cors-origins * the Origin is echoed back)", group: G, support: "supported",
  },
  {
    names: ["--api-prefix"], value: { type: "string" }, hint: "PREFIX", env: "LLAMA_ARG_API_PREFIX", key: "apiPrefix", default: "",
    help: "path prefix every route (and the web UI) is served under, without the trailing slash (e.g. /llm)", group: G, support: "supported",
  },
  refuse(G, ["--ui-config", "--webui-config"], UI_CONFIG, "JSON of web UI defaults", { hint: "JSON", env: "LLAMA_ARG_UI_CONFIG" }),
  refuse(G, ["--ui-config-file", "--webui-config-file"], UI_CONFIG, "file of web UI defaults", { hint: "PATH", env: "LLAMA_ARG_UI_CONFIG_FILE" }),
  refuse(G, ["--ui-mcp-proxy", "--webui-mcp-proxy"], UI_MCP, "MCP CORS proxy for the web UI", {
    neg: ["--no-ui-mcp-proxy", "--no-webui-mcp-proxy"], env: "LLAMA_ARG_UI_MCP_PROXY", accepts: false,
  }),
  refuse(G, ["--tools"], AGENT, "built-in tools for agents, comma-separated, or all", { hint: "TOOL1,TOOL2,...", env: "LLAMA_ARG_TOOLS" }),
  refuse(G, ["--tools-runtime"], AGENT, "where built-in tools run (docker:<image>, ssh:<target>, ...)", { hint: "OPTION", env: "LLAMA_ARG_TOOLS_RUNTIME" }),
  refuse(G, ["--mcp-servers-config"], AGENT, "JSON file of MCP server definitions", { hint: "PATH", env: "LLAMA_ARG_MCP_SERVERS_CONFIG" }),
  refuse(G, ["--mcp-servers-json"], AGENT, "inline JSON of MCP server definitions", { hint: "JSON", env: "LLAMA_ARG_MCP_SERVERS_JSON" }),
  refuse(G, ["-ag", "--agent"], AGENT, "turn on the CORS proxy and every built-in tool", { neg: ["-no-ag", "--no-agent"], env: "LLAMA_ARG_AGENT", accepts: false }),
  {
    names: ["--ui", "--webui"], negNames: ["--no-ui", "--no-webui"], value: { type: "bool" }, env: "LLAMA_ARG_UI", key: "ui", default: true,
    help: "serve the web UI: chat at /, the experts' placement at /placement", group: G, support: "supported",
  },
  refuse(G, ["--embedding", "--embeddings"], EMBED, "serve embeddings only (embedding models)", { env: "LLAMA_ARG_EMBEDDINGS" }),
  refuse(G, ["--rerank", "--reranking"], EMBED, "serve the reranking endpoint", { env: "LLAMA_ARG_RERANKING" }),
  {
    names: ["--api-key"], hint: "KEY", env: "LLAMA_API_KEY", key: "apiKeys", default: [], repeat: "append",
    value: { type: "list", of: { type: "string" }, split: "csv", dropEmpty: true },
    help: "API keys clients must send, comma-separated; none means the API is open", group: G, support: "supported",
  },
  {
    names: ["--api-key-file"], value: { type: "string", nonEmpty: true }, hint: "FNAME", env: "LLAMA_ARG_API_KEY_FILE", key: "apiKeyFile",
    help: "file of API keys, one per line; lines starting with # are comments", group: G, support: "supported",
  },
  refuse(G, ["--ssl-key-file"], "TLS is not supported; put a TLS-terminating proxy in front", "PEM private key for HTTPS", { hint: "FNAME", env: "LLAMA_ARG_SSL_KEY_FILE" }),
  refuse(G, ["--ssl-cert-file"], "TLS is not supported; put a TLS-terminating proxy in front", "PEM certificate for HTTPS", { hint: "FNAME", env: "LLAMA_ARG_SSL_CERT_FILE" }),
  {
    names: ["--chat-template-kwargs"], value: { type: "json" }, hint: "STRING", env: "LLAMA_ARG_CHAT_TEMPLATE_KWARGS",
    key: "chatTemplateKwargs", default: {}, repeat: "append",
    help: "extra variables for the chat template, as a JSON object (e.g. '{\"enable_thinking\":false}'); repeats merge",
    group: G, support: "supported",
  },
  {
    names: ["-to", "--timeout"], value: { type: "int", min: 0 }, hint: "N", env: "LLAMA_ARG_TIMEOUT", key: "timeout", default: 3600,
    help: "HTTP read/write timeout in seconds", group: G, support: "supported",
  },
  refuse(G, ["--sse-ping-interval"], "SSE keep-alive pings are not configurable yet", "seconds between SSE pings (-1 = off)", { hint: "N", env: "LLAMA_ARG_SSE_PING_INTERVAL", default: 30 }),
  refuse(G, ["--threads-http"], "HTTP threads do not apply: Bun serves HTTP on its event loop", "threads serving HTTP requests", { hint: "N", env: "LLAMA_ARG_THREADS_HTTP" }),
  {
    names: ["--cache-prompt"], negNames: ["--no-cache-prompt"], value: { type: "bool" }, env: "LLAMA_ARG_CACHE_PROMPT", key: "cachePrompt",
    default: true, help: "reuse the cached prefix of a slot's last prompt", group: G, support: "supported",
  },
  {
    names: ["--cache-reuse"], value: { type: "int", min: 0 }, hint: "N", env: "LLAMA_ARG_CACHE_REUSE", key: "cacheReuse", default: 0,
    help: "smallest chunk reused from the cache by shifting the KV cache (needs prompt caching; 0 = off)", group: G, support: "supported",
  },
  {
    names: ["--metrics"], value: { type: "none" }, env: "LLAMA_ARG_ENDPOINT_METRICS", key: "metrics", default: false,
    help: "serve Prometheus metrics on /metrics", group: G, support: "supported",
  },
  {
    names: ["--props"], value: { type: "none" }, env: "LLAMA_ARG_ENDPOINT_PROPS", key: "props", default: false,
    help: "let POST /props change global properties", group: G, support: "supported",
  },
  {
    names: ["--slots"], negNames: ["--no-slots"], value: { type: "bool" }, env: "LLAMA_ARG_ENDPOINT_SLOTS", key: "slots", default: true,
    help: "serve slot monitoring on /slots", group: G, support: "supported",
  },
  {
    names: ["--slot-save-path"], value: { type: "string", nonEmpty: true }, hint: "PATH", key: "slotSavePath",
    help: "directory where /slots save and restore slot caches (unset: those actions answer 501)", group: G, support: "supported",
  },
  refuse(G, ["--models-dir"], ROUTER, "directory of models for router mode", { hint: "PATH", env: "LLAMA_ARG_MODELS_DIR" }),
  refuse(G, ["--models-preset"], ROUTER, "INI file of model presets for router mode", { hint: "PATH", env: "LLAMA_ARG_MODELS_PRESET" }),
  refuse(G, ["--models-max"], ROUTER, "most models loaded at once in router mode", { hint: "N", env: "LLAMA_ARG_MODELS_MAX", default: 4 }),
  refuse(G, ["--models-autoload"], ROUTER, "load models on demand in router mode", { neg: ["--no-models-autoload"], env: "LLAMA_ARG_MODELS_AUTOLOAD" }),
  {
    names: ["--jinja"], negNames: ["--no-jinja"], value: { type: "bool" }, env: "LLAMA_ARG_JINJA", key: "jinja", default: true,
    help: "render chat templates with the Jinja engine", group: G, support: "supported",
  },
  {
    names: ["--reasoning-format"], hint: "FORMAT", env: "LLAMA_ARG_THINK", key: "reasoningFormat", default: "auto",
    value: { type: "enum", values: ["none", "auto", "deepseek", "deepseek-legacy"] },
    help: "where thoughts go: none (left in content), deepseek or auto (reasoning_content), deepseek-legacy (both)",
    group: G, support: "supported",
  },
  refuse(G, ["-rea", "--reasoning"], "--reasoning is not supported yet; use --chat-template-kwargs '{\"enable_thinking\":false}' or --reasoning-budget 0", "thinking on, off or auto (from the template)", { hint: "[on|off|auto]", env: "LLAMA_ARG_REASONING" }),
  {
    names: ["--reasoning-effort"], value: { type: "string", nonEmpty: true }, hint: "LEVEL", env: "LLAMA_ARG_REASONING_EFFORT", key: "reasoningEffort", default: "default",
    help: "reasoning effort given to the chat template: 'default' keeps the template's, or a level such as low, medium, high (gpt-oss's 'Reasoning:' line)",
    group: G, support: "supported",
  },
  {
    names: ["--reasoning-budget"], value: { type: "int", min: -1 }, hint: "N", env: "LLAMA_ARG_THINK_BUDGET", key: "reasoningBudget", default: -1,
    help: "thinking token budget: -1 unlimited, 0 ends thinking at once, N stops after N tokens", group: G, support: "supported",
  },
  refuse(G, ["--reasoning-budget-message"], "a reasoning budget message is not supported yet", "text inserted before the end of thinking when the budget runs out", { hint: "MESSAGE", env: "LLAMA_ARG_THINK_BUDGET_MESSAGE" }),
  refuse(G, ["--reasoning-preserve"], "reasoning preservation control is not supported yet", "keep earlier turns' reasoning in the history", { neg: ["--no-reasoning-preserve"], env: "LLAMA_ARG_REASONING_PRESERVE" }),
  {
    names: ["--chat-template"], value: { type: "string", nonEmpty: true }, hint: "JINJA_TEMPLATE", env: "LLAMA_ARG_CHAT_TEMPLATE",
    key: "chatTemplate", help: "chat template (Jinja source or a built-in name) instead of the model's", group: G, support: "supported",
  },
  {
    names: ["--chat-template-file"], value: { type: "string", nonEmpty: true }, hint: "JINJA_TEMPLATE_FILE", env: "LLAMA_ARG_CHAT_TEMPLATE_FILE",
    key: "chatTemplateFile", help: "file holding a Jinja chat template used instead of the model's", group: G, support: "supported",
  },
  refuse(G, ["--skip-chat-parsing"], "turning off chat output parsing is not supported yet", "return all output as plain content, unparsed", { neg: ["--no-skip-chat-parsing"], env: "LLAMA_ARG_SKIP_CHAT_PARSING" }),
  refuse(G, ["--prefill-assistant"], "prefill control is not supported yet", "continue a trailing assistant message instead of starting a new one", { neg: ["--no-prefill-assistant"], env: "LLAMA_ARG_PREFILL_ASSISTANT" }),
  refuse(G, ["-sps", "--slot-prompt-similarity"], "slot prompt similarity is not supported yet", "how closely a prompt must match a slot's to reuse it", { hint: "SIMILARITY", default: 0.1 }),
  refuse(G, ["--lora-init-without-apply"], "LoRA adapters are not supported yet", "load LoRA adapters without applying them"),
  refuse(G, ["--sleep-idle-seconds"], "idle sleep is not supported yet", "seconds of idleness before the server sleeps (-1 = never)", { hint: "SECONDS", default: -1 }),
  refuse(G, ["--log-prompts-dir"], "prompt logging is not supported yet", "directory where prompts are logged (debugging)", { hint: "PATH" }),
  refuse(G, ["--embd-gemma-default"], PRESET, "preset: EmbeddingGemma"),
  refuse(G, ["--fim-qwen-1.5b-default"], PRESET, "preset: Qwen 2.5 Coder 1.5B"),
  refuse(G, ["--fim-qwen-3b-default"], PRESET, "preset: Qwen 2.5 Coder 3B"),
  refuse(G, ["--fim-qwen-7b-default"], PRESET, "preset: Qwen 2.5 Coder 7B"),
  refuse(G, ["--fim-qwen-7b-spec"], PRESET, "preset: Qwen 2.5 Coder 7B with a 0.5B draft"),
  refuse(G, ["--fim-qwen-14b-spec"], PRESET, "preset: Qwen 2.5 Coder 14B with a 0.5B draft"),
  refuse(G, ["--fim-qwen-30b-default"], PRESET, "preset: Qwen 3 Coder 30B A3B Instruct"),
  refuse(G, ["--gpt-oss-20b-default"], PRESET, "preset: gpt-oss-20b"),
  refuse(G, ["--gpt-oss-120b-default"], PRESET, "preset: gpt-oss-120b"),
  refuse(G, ["--vision-gemma-4b-default"], PRESET, "preset: Gemma 3 4B QAT"),
  refuse(G, ["--vision-gemma-12b-default"], PRESET, "preset: Gemma 3 12B QAT"),
  refuse(G, ["--spec-default"], "speculative decoding is not supported yet", "turn on the default speculative decoding setup"),
];
