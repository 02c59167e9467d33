// llama-server's common flags (llama.cpp common/arg.cpp, "common params"): model, context, threads, placement, logging.

import { KV_CACHE_TYPES, ON_OFF_AUTO, refuse } from "./flag-define.ts";
import type { FlagDef, FlagValue } from "./flag-types.ts";

const G = "common";

const CPU_PLACEMENT = "CPU affinity, priority and polling controls are not supported yet";
const ROPE = "RoPE / YaRN overrides are not supported yet; the model's own settings are used";
const MULTIMODAL = "multimodal projectors (images, audio, video) are not supported yet";
const LOGGING = "log formatting and log files are not supported yet; use -v or --log-disable";
const LORA = "LoRA adapters are not supported yet";
const CONTROL = "control vectors are not supported yet";
const DRAFT = "speculative decoding is not supported yet";

function devicesOrNone(v: FlagValue): string | undefined {
  if (!Array.isArray(v)) return undefined;
  return v.length === 0 || (v.includes("none") && v.length > 1) ? "a comma-separated list of devices, or none on its own" : undefined;
}

export const COMMON_FLAGS: readonly FlagDef[] = [
  { names: ["-h", "--help", "--usage"], value: { type: "none" }, key: "help", help: "print this help and exit", group: G, support: "supported", action: "help" },
  { names: ["--version"], value: { type: "none" }, key: "version", help: "print the version and build information and exit", group: G, support: "supported", action: "version" },
  refuse(G, ["-cl", "--cache-list"], "listing the model cache is not supported yet", "list the models in the download cache and exit"),
  refuse(G, ["--completion-bash"], "shell completion scripts are not supported yet", "print a bash completion script and exit"),
  {
    names: ["-t", "--threads"], value: { type: "int" }, hint: "N", env: "LLAMA_ARG_THREADS", key: "threads", default: -1,
    defaultText: "-1, all cores", help: "CPU threads used while generating; 0 or less means one per core",
    group: G, support: "supported",
  },
  {
    names: ["-tb", "--threads-batch"], value: { type: "int" }, hint: "N", key: "threadsBatch", default: -1,
    defaultText: "same as --threads", help: "CPU threads used for prompt processing and batches",
    group: G, support: "supported",
  },
  refuse(G, ["-C", "--cpu-mask"], CPU_PLACEMENT, "CPU affinity mask (hexadecimal) for the generation threads", { hint: "M" }),
  refuse(G, ["-Cr", "--cpu-range"], CPU_PLACEMENT, "CPU range for affinity of the generation threads", { hint: "lo-hi" }),
  refuse(G, ["--cpu-strict"], CPU_PLACEMENT, "pin generation threads strictly to the chosen CPUs", { hint: "<0|1>" }),
  refuse(G, ["--prio"], CPU_PLACEMENT, "thread priority: -1 low, 0 normal, 1 medium, 2 high, 3 realtime", { hint: "N" }),
  refuse(G, ["--poll"], CPU_PLACEMENT, "busy-wait level while waiting for work (0 = none)", { hint: "<0...100>" }),
  refuse(G, ["-Cb", "--cpu-mask-batch"], CPU_PLACEMENT, "CPU affinity mask for the batch threads", { hint: "M" }),
  refuse(G, ["-Crb", "--cpu-range-batch"], CPU_PLACEMENT, "CPU range for affinity of the batch threads", { hint: "lo-hi" }),
  refuse(G, ["--cpu-strict-batch"], CPU_PLACEMENT, "pin batch threads strictly to the chosen CPUs", { hint: "<0|1>" }),
  refuse(G, ["--prio-batch"], CPU_PLACEMENT, "priority of the batch threads", { hint: "N" }),
  refuse(G, ["--poll-batch"], CPU_PLACEMENT, "busy-wait level of the batch threads", { hint: "<0|1>" }),
  {
    names: ["-c", "--ctx-size"], value: { type: "int", min: 0 }, hint: "N", env: "LLAMA_ARG_CTX_SIZE", key: "ctxSize", default: 0,
    defaultText: "0, the model's training context", help: "context size in tokens; 0 takes it from the model. With -np N it is shared by the N slots (each gets -c / N, as in llama-server). " +
      "With -np auto (the default) it is each slot's context, the slots holding -c x their count in separate caches: llama-server's -np auto " +
      "instead gives 4 slots one unified cache of -c tokens. One request can use all -c tokens either way; bloomery reserves them for every slot",
    group: G, support: "supported",
  },
  {
    names: ["-n", "--predict", "--n-predict"], value: { type: "int", min: -1 }, hint: "N", env: "LLAMA_ARG_N_PREDICT", key: "nPredict",
    default: -1, defaultText: "-1, no limit", help: "default limit on generated tokens per request (-1 = no limit)",
    group: G, support: "supported",
  },
  {
    names: ["-b", "--batch-size"], value: { type: "int", min: 1 }, hint: "N", env: "LLAMA_ARG_BATCH", key: "batchSize", default: 2048,
    help: "logical batch size: most tokens submitted to one forward pass", group: G, support: "supported",
  },
  {
    names: ["-ub", "--ubatch-size"], value: { type: "int", min: 1 }, hint: "N", env: "LLAMA_ARG_UBATCH", key: "ubatchSize", default: 512,
    help: "physical batch size: most tokens computed at once", group: G, support: "supported",
  },
  refuse(G, ["--keep"], "keeping prompt tokens across a context shift (--keep) is not supported yet", "tokens of the prompt kept when the context shifts (-1 = all)", { hint: "N", default: 0 }),
  refuse(G, ["--swa-full"], "sliding-window attention cache options are not supported yet", "use a full-size cache for sliding-window attention layers", { env: "LLAMA_ARG_SWA_FULL" }),
  {
    names: ["-fa", "--flash-attn"], value: ON_OFF_AUTO, hint: "[on|off|auto]", env: "LLAMA_ARG_FLASH_ATTN", key: "flashAttn",
    default: "auto", implied: "on", help: "flash attention: on, off or auto (a bare -fa, the old spelling, means on)",
    group: G, support: "supported",
  },
  refuse(G, ["--perf"], "libllama performance timings do not exist in bloomery", "internal performance timings", { neg: ["--no-perf"], env: "LLAMA_ARG_PERF" }),
  refuse(G, ["-e", "--escape"], "escape processing of prompt text is not supported", "process escape sequences (\\n, \\t, ...) in prompt text", { neg: ["--no-escape"] }),
  refuse(G, ["--rope-scaling"], ROPE, "RoPE scaling method: none, linear or yarn", { hint: "{none,linear,yarn}", env: "LLAMA_ARG_ROPE_SCALING_TYPE" }),
  refuse(G, ["--rope-scale"], ROPE, "RoPE context scaling factor (expands the context N times)", { hint: "N", env: "LLAMA_ARG_ROPE_SCALE" }),
  refuse(G, ["--rope-freq-base"], ROPE, "RoPE base frequency", { hint: "N", env: "LLAMA_ARG_ROPE_FREQ_BASE" }),
  refuse(G, ["--rope-freq-scale"], ROPE, "RoPE frequency scaling factor (expands the context 1/N times)", { hint: "N", env: "LLAMA_ARG_ROPE_FREQ_SCALE" }),
  refuse(G, ["--yarn-orig-ctx"], ROPE, "YaRN: the model's original context size", { hint: "N", env: "LLAMA_ARG_YARN_ORIG_CTX" }),
  refuse(G, ["--yarn-ext-factor"], ROPE, "YaRN: extrapolation mix factor", { hint: "N", env: "LLAMA_ARG_YARN_EXT_FACTOR" }),
  refuse(G, ["--yarn-attn-factor"], ROPE, "YaRN: attention magnitude scale", { hint: "N", env: "LLAMA_ARG_YARN_ATTN_FACTOR" }),
  refuse(G, ["--yarn-beta-slow"], ROPE, "YaRN: high correction dimension", { hint: "N", env: "LLAMA_ARG_YARN_BETA_SLOW" }),
  refuse(G, ["--yarn-beta-fast"], ROPE, "YaRN: low correction dimension", { hint: "N", env: "LLAMA_ARG_YARN_BETA_FAST" }),
  refuse(G, ["-kvo", "--kv-offload"], "KV cache offload control is not supported yet", "keep the KV cache on the GPU", { neg: ["-nkvo", "--no-kv-offload"], env: "LLAMA_ARG_KV_OFFLOAD" }),
  refuse(G, ["--repack"], "weight repacking control is not supported", "repack weights for faster CPU kernels", { neg: ["-nr", "--no-repack"], env: "LLAMA_ARG_REPACK" }),
  refuse(G, ["--no-host"], "host buffer bypass is not supported", "bypass the host buffer so extra buffer types can be used", { env: "LLAMA_ARG_NO_HOST" }),
  {
    names: ["-ctk", "--cache-type-k"], hint: "TYPE", env: "LLAMA_ARG_CACHE_TYPE_K", key: "cacheTypeK", default: "f16",
    value: { type: "enum", values: KV_CACHE_TYPES, supported: ["f16"], refusedReason: "only the f16 KV cache is implemented yet" },
    help: `KV cache type for K; llama allows ${KV_CACHE_TYPES.join(", ")}`, group: G, support: "supported",
  },
  {
    names: ["-ctv", "--cache-type-v"], hint: "TYPE", env: "LLAMA_ARG_CACHE_TYPE_V", key: "cacheTypeV", default: "f16",
    value: { type: "enum", values: KV_CACHE_TYPES, supported: ["f16"], refusedReason: "only the f16 KV cache is implemented yet" },
    help: `KV cache type for V; llama allows ${KV_CACHE_TYPES.join(", ")}`, group: G, support: "supported",
  },
  refuse(G, ["-dt", "--defrag-thold"], "deprecated by llama.cpp, where it has no effect; remove it", "KV cache defragmentation threshold (deprecated)", { hint: "N", env: "LLAMA_ARG_DEFRAG_THOLD" }),
  refuse(G, ["-mm", "--mmproj"], MULTIMODAL, "multimodal projector file", { hint: "FILE", env: "LLAMA_ARG_MMPROJ" }),
  refuse(G, ["-mmu", "--mmproj-url"], MULTIMODAL, "URL of a multimodal projector file", { hint: "URL", env: "LLAMA_ARG_MMPROJ_URL" }),
  refuse(G, ["--mmproj-offload"], MULTIMODAL, "run the multimodal projector on the GPU", { neg: ["--no-mmproj-offload"], env: "LLAMA_ARG_MMPROJ_OFFLOAD" }),
  refuse(G, ["-mmdev", "--mmproj-device"], MULTIMODAL, "device for the multimodal projector", { hint: "DEVICE", env: "MTMD_BACKEND_DEVICE" }),
  refuse(G, ["--image-min-tokens"], MULTIMODAL, "fewest tokens an image may take", { hint: "N", env: "LLAMA_ARG_IMAGE_MIN_TOKENS" }),
  refuse(G, ["--image-max-tokens"], MULTIMODAL, "most tokens an image may take", { hint: "N", env: "LLAMA_ARG_IMAGE_MAX_TOKENS" }),
  refuse(G, ["--video-fps"], MULTIMODAL, "video frames sampled per second", { hint: "N", env: "LLAMA_ARG_VIDEO_FPS" }),
  refuse(G, ["--video-timestamp-interval"], MULTIMODAL, "milliseconds between video timestamps", { hint: "N", env: "LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL" }),
  refuse(G, ["--video-ffmpeg-dir"], MULTIMODAL, "directory holding ffmpeg and ffprobe", { hint: "DIR", env: "LLAMA_ARG_VIDEO_FFMPEG_DIR" }),
  refuse(G, ["--rpc"], "RPC backends are not supported", "comma-separated RPC servers (host:port)", { hint: "SERVERS", env: "LLAMA_ARG_RPC" }),
  {
    names: ["-lm", "--load-mode"], hint: "MODE", env: "LLAMA_ARG_LOAD_MODE", key: "loadMode", default: "auto",
    value: {
      type: "enum", values: ["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"], supported: ["auto", "none", "mmap"],
      refusedReason: "mlock and direct I/O loading are not supported yet (use auto, none or mmap)",
    },
    help: "how the model file is read: auto (mmap), none (plain reads), mmap; llama also has mlock, mmap+mlock, dio",
    group: G, support: "supported",
  },
  {
    names: ["--mmap"], negNames: ["--no-mmap"], value: { type: "bool" }, env: "LLAMA_ARG_MMAP", key: "loadMode",
    stores: { on: "mmap", off: "none" }, help: "memory-map the model file, or read it (older spelling of --load-mode mmap|none)",
    group: G, support: "supported",
  },
  refuse(G, ["--mlock"], "locking the model in RAM (mlock) is not supported yet", "keep the model in RAM, never swapped (older spelling of --load-mode mlock)", { env: "LLAMA_ARG_MLOCK" }),
  refuse(G, ["-lzm", "--lazy-mode"], "lazy tensor reads are not supported yet", "read some large tensors from disk on demand: on, auto or off", { hint: "MODE", env: "LLAMA_ARG_LAZY_MODE" }),
  refuse(G, ["--numa"], "NUMA strategies are not supported yet", "NUMA strategy: distribute, isolate or numactl", { hint: "TYPE", env: "LLAMA_ARG_NUMA" }),
  {
    names: ["-dev", "--device"], hint: "<dev1,dev2,..>", env: "LLAMA_ARG_DEVICE", key: "devices", default: [],
    defaultText: "every GPU", value: { type: "list", of: { type: "string" }, split: ",", trim: true, dropEmpty: true }, check: devicesOrNone,
    help: "comma-separated devices to offload to (CUDA0, ...); none keeps everything on the CPU", group: G, support: "supported",
  },
  { names: ["--list-devices"], value: { type: "none" }, key: "listDevices", help: "print the available devices and exit", group: G, support: "supported", action: "list-devices" },
  {
    names: ["-ot", "--override-tensor"], hint: "<tensor name pattern>=<buffer type>,...", env: "LLAMA_ARG_OVERRIDE_TENSOR",
    key: "overrideTensor", default: [], value: { type: "list", of: { type: "override" }, split: "," }, repeat: "append",
    help: "place tensors whose name matches a regular expression in a buffer (CPU, CUDA0, ...); comma-separated, repeatable",
    group: G, support: "supported",
  },
  {
    names: ["-cmoe", "--cpu-moe"], value: { type: "none" }, env: "LLAMA_ARG_CPU_MOE", key: "cpuMoe", default: false,
    help: "keep every mixture-of-experts expert weight in host memory", group: G, support: "supported",
  },
  {
    names: ["-ncmoe", "--n-cpu-moe"], value: { type: "int", min: 0 }, hint: "N", env: "LLAMA_ARG_N_CPU_MOE", key: "nCpuMoe", default: 0,
    help: "keep the expert weights of the first N layers in host memory", group: G, support: "supported",
  },
  refuse(G, ["-ncffn", "--n-cpu-ffn"], "dense FFN placement is not supported yet; use -ot", "keep the dense FFN weights of the first N layers in host memory", { hint: "N", env: "LLAMA_ARG_N_CPU_FFN" }),
  {
    names: ["-ngl", "--gpu-layers", "--n-gpu-layers"], hint: "N", env: "LLAMA_ARG_N_GPU_LAYERS", key: "nGpuLayers", default: "auto",
    value: { type: "int", keywords: { auto: "auto", all: "all" } },
    help: "most layers stored in GPU memory: a number, auto or all (-1 is auto, less is all)", group: G, support: "supported",
  },
  {
    names: ["-sm", "--split-mode"], hint: "{none,layer,row,tensor}", env: "LLAMA_ARG_SPLIT_MODE", key: "splitMode", default: "layer",
    value: {
      type: "enum", values: ["none", "layer", "row", "tensor"], supported: ["none", "layer"],
      refusedReason: "row and tensor splits are not supported yet (use layer or none)",
    },
    help: "how several GPUs share the model: none (one GPU), layer (pipelined layers); llama also has row, tensor",
    group: G, support: "supported",
  },
  {
    names: ["-ts", "--tensor-split"], hint: "N0,N1,N2,...", env: "LLAMA_ARG_TENSOR_SPLIT", key: "tensorSplit", default: [],
    value: { type: "list", of: { type: "float", min: 0 }, split: "comma-slash" },
    help: "share of the model for each GPU, as proportions (e.g. 3,1)", group: G, support: "supported",
  },
  {
    names: ["-mg", "--main-gpu"], value: { type: "int", min: 0 }, hint: "INDEX", env: "LLAMA_ARG_MAIN_GPU", key: "mainGpu", default: 0,
    help: "the GPU used with split mode none, and for intermediate results", group: G, support: "supported",
  },
  {
    names: ["-fit", "--fit"], value: { type: "toggle" }, hint: "[on|off]", env: "LLAMA_ARG_FIT", key: "fit", default: true,
    help: "fit the settings not given (context, layers, expert placement) into free device memory", group: G, support: "supported",
  },
  {
    names: ["-fitt", "--fit-target"], hint: "MiB0,MiB1,MiB2,...", env: "LLAMA_ARG_FIT_TARGET", key: "fitTargetMiB", default: [1024],
    value: { type: "list", of: { type: "int", min: 0 }, split: "comma-slash" },
    help: "memory (MiB) --fit leaves free on each device; one value applies to all", group: G, support: "supported",
  },
  {
    names: ["--host-budget"], hint: "MiB", env: "BLOOMERY_HOST_BUDGET", key: "hostBudgetMiB", default: 0, value: { type: "int", min: 0 },
    help: "plan as if the host had at most this much memory available (MiB; 0 = what it has): routed experts past it are read from the file on demand",
    group: G, support: "supported",
  },
  {
    names: ["--card-budget"], hint: "MiB", env: "BLOOMERY_CARD_BUDGET", key: "cardBudgetMiB", default: 0, value: { type: "int", min: 0 },
    help: "plan as if the card had at most this much memory free (MiB; 0 = what it has)",
    group: G, support: "supported",
  },
  {
    names: ["--promote-slots"], hint: "N|auto", env: "BLOOMERY_PROMOTE_SLOTS", key: "promoteSlots", default: 0,
    defaultText: "auto when the plan itself moves experts to host RAM because the card is too small, else 0",
    value: { type: "int", min: 0, keywords: { auto: -1 } },
    help: "on a card with routed experts in host RAM: N card slots a host layer that the most used experts move into while serving " +
      "(0 = off; at least the experts a token uses). auto: the card memory left after the weights, the KV cache and buffers and 1 GiB " +
      "(of --card-budget when given), divided among the host layers, at most a layer's experts; off when under the experts a token uses",
    group: G, support: "supported",
  },
  {
    names: ["--batch-invariant"], value: { type: "none" }, env: "BLOOMERY_BATCH_INVARIANT", key: "batchInvariant", default: false,
    help: "on a card, compute every token as it would be computed alone, so a request's output does not depend on the others batched with it (slower; the CPU path always is)",
    group: G, support: "supported",
  },
  refuse(G, ["-fitc", "--fit-ctx"], "--fit-ctx is not supported yet", "smallest context --fit may choose", { hint: "N", env: "LLAMA_ARG_FIT_CTX", default: 4096 }),
  refuse(G, ["--check-tensors"], "tensor data checks are not supported yet", "check the model's tensor data for invalid values"),
  refuse(G, ["--override-kv"], "model metadata overrides are not supported yet", "override model metadata: KEY=TYPE:VALUE,... (int, float, bool, str)", { hint: "KEY=TYPE:VALUE,..." }),
  refuse(G, ["--op-offload"], "host operation offload control is not supported", "offload host tensor operations to the device", { neg: ["--no-op-offload"] }),
  refuse(G, ["--lora"], LORA, "LoRA adapter file(s), comma-separated", { hint: "FNAME" }),
  refuse(G, ["--lora-scaled"], LORA, "LoRA adapters with scales: FNAME:SCALE,...", { hint: "FNAME:SCALE,..." }),
  refuse(G, ["--control-vector"], CONTROL, "control vector file(s), comma-separated", { hint: "FNAME" }),
  refuse(G, ["--control-vector-scaled"], CONTROL, "control vectors with scales: FNAME:SCALE,...", { hint: "FNAME:SCALE,..." }),
  refuse(G, ["--control-vector-layer-range"], CONTROL, "first and last layer the control vectors apply to", { hint: "START END" }),
  {
    names: ["-m", "--model"], value: { type: "string", nonEmpty: true }, hint: "FNAME", env: "LLAMA_ARG_MODEL", key: "model",
    help: "GGUF model file to load (the first part of a split set)", group: G, support: "supported",
  },
  {
    names: ["--demo"], value: { type: "none" }, key: "demo", default: false, group: G, support: "supported",
    help: "serve the demo model built into this executable (a 15 MB Qwen3-MoE trained on Python sources; no download)",
  },
  {
    names: ["--recommend"], value: { type: "none" }, key: "recommend", default: false, group: G, support: "supported",
    help: "print this machine's cards, RAM and CPU, the known models that fit and the command to start each, then exit (docs/agents.md)",
  },
  {
    names: ["--dry-run"], value: { type: "none" }, key: "dryRun", default: false, group: G, support: "supported",
    help: "print the plan a start would use (model, backend, context, memory, fit) and exit; downloads and loads nothing",
  },
  {
    names: ["--json"], value: { type: "none" }, env: "BLOOMERY_JSON_EVENTS", key: "json", default: false, group: G, support: "supported",
    help: "agent mode: --recommend and --dry-run print JSON; a start prints one JSON event a line on stdout (logs stay on stderr)",
  },
  refuse(G, ["-mu", "--model-url"], "downloading a model from a URL is not supported yet; use -m or -hf", "download the model from this URL", { hint: "MODEL_URL", env: "LLAMA_ARG_MODEL_URL" }),
  refuse(G, ["-dr", "--docker-repo"], "Docker Hub models are not supported; use -m or -hf", "model from Docker Hub: [<repo>/]<model>[:quant]", { hint: "[<repo>/]<model>[:quant]", env: "LLAMA_ARG_DOCKER_REPO" }),
  {
    names: ["-hf", "-hfr", "--hf-repo"], value: { type: "string", nonEmpty: true }, hint: "<user>/<model>[:quant]", env: "LLAMA_ARG_HF_REPO",
    key: "hfRepo", help: "Hugging Face repository to download the model from; the quant tag (default Q4_K_M) is case-insensitive",
    group: G, support: "supported",
  },
  {
    names: ["-hff", "--hf-file"], value: { type: "string", nonEmpty: true }, hint: "FILE", env: "LLAMA_ARG_HF_FILE", key: "hfFile",
    help: "file of the --hf-repo repository to use, instead of choosing by quant", group: G, support: "supported",
  },
  {
    names: ["-hft", "--hf-token"], value: { type: "string" }, hint: "TOKEN", env: "HF_TOKEN", key: "hfToken",
    help: "Hugging Face access token for gated or private repositories", group: G, support: "supported",
  },
  {
    names: ["--log-disable"], value: { type: "none" }, key: "logDisable", default: false, help: "print no log messages",
    group: G, support: "supported",
  },
  refuse(G, ["--log-file"], LOGGING, "also write the log to this file", { hint: "FNAME", env: "LLAMA_ARG_LOG_FILE" }),
  refuse(G, ["--log-jsonl"], LOGGING, "log one JSON object per line", { neg: ["--no-log-jsonl"], env: "LLAMA_ARG_LOG_JSONL" }),
  refuse(G, ["--log-colors"], LOGGING, "colored log: on, off or auto", { hint: "[on|off|auto]", env: "LLAMA_ARG_LOG_COLORS" }),
  {
    names: ["-v", "--verbose", "--log-verbose"], value: { type: "none" }, key: "verbose", default: false,
    help: "log everything, debug messages included", group: G, support: "supported",
  },
  {
    names: ["--offline"], value: { type: "none" }, env: "LLAMA_ARG_OFFLINE", key: "offline", default: false,
    help: "never use the network: models come from the cache only", group: G, support: "supported",
  },
  refuse(G, ["-lv", "--verbosity", "--log-verbosity"], LOGGING, "log threshold: 0 generic, 1 error, 2 warning, 3 info, 4 trace, 5 debug", { hint: "N", env: "LLAMA_ARG_LOG_VERBOSITY", default: 3 }),
  refuse(G, ["--log-prefix"], LOGGING, "prefix log messages", { neg: ["--no-log-prefix"], env: "LLAMA_ARG_LOG_PREFIX" }),
  refuse(G, ["--log-timestamps"], LOGGING, "timestamp log messages", { neg: ["--no-log-timestamps"], env: "LLAMA_ARG_LOG_TIMESTAMPS" }),
  refuse(G, ["--spec-draft-type-k", "-ctkd", "--cache-type-k-draft"], DRAFT, "KV cache type for K of the draft model", { hint: "TYPE", env: "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K" }),
  refuse(G, ["--spec-draft-type-v", "-ctvd", "--cache-type-v-draft"], DRAFT, "KV cache type for V of the draft model", { hint: "TYPE", env: "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V" }),
];
