// llama-server's speculative-decoding flags (llama.cpp common/arg.cpp, "speculative params"):
// `--spec-type ngram-simple` (drafts from the sequence itself) with its three settings, draft-simple (a
// draft model, -md) and draft-mtp (the file's MTP layer: spec-mtp.ts); the other kinds and flags are
// recognised and refused by name.

import { refuse } from "./flag-define.ts";
import type { FlagDef } from "./flag-types.ts";

const G = "spec";
const SPEC = "speculative decoding is not supported yet";

function removed(use: string): string {
  return `removed from llama.cpp; use ${use}`;
}

const SPEC_KINDS = ["none", "ngram-simple", "draft-simple", "draft-eagle3", "draft-mtp", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"];

/** What is wrong with a --spec-type list, or undefined. */
const RUN = ["none", "ngram-simple", "draft-simple", "draft-mtp"];

function specTypeProblem(v: string): string | undefined {
  const kinds = v.split(",").map((k) => k.trim());
  for (const k of kinds) {
    if (!SPEC_KINDS.includes(k)) return `one of none, ngram-simple, draft-simple, draft-mtp (got '${k}')`;
    if (!RUN.includes(k)) return `none, ngram-simple, draft-simple or draft-mtp: '${k}' is not supported yet (EAGLE heads and the other ngram kinds are not run by this engine)`;
  }
  if (kinds.includes("none") && kinds.length > 1) return "'none' alone, or one of ngram-simple, draft-simple, draft-mtp";
  if (kinds.length > 1) return "one kind at a time (ngram-simple, draft-simple or draft-mtp)";
  return undefined;
}

export const SPEC_FLAGS: readonly FlagDef[] = [
  refuse(G, ["--spec-draft-hf", "-hfd", "-hfrd", "--hf-repo-draft"], SPEC, "Hugging Face repository of the draft model", { hint: "<user>/<model>[:quant]", env: "LLAMA_ARG_SPEC_DRAFT_HF_REPO" }),
  refuse(G, ["--spec-draft-threads", "-td", "--threads-draft"], SPEC, "draft model generation threads", { hint: "N" }),
  refuse(G, ["--spec-draft-threads-batch", "-tbd", "--threads-batch-draft"], SPEC, "draft model batch threads", { hint: "N" }),
  refuse(G, ["--spec-draft-cpu-mask", "-Cd", "--cpu-mask-draft"], SPEC, "draft model CPU affinity mask", { hint: "M" }),
  refuse(G, ["--spec-draft-cpu-range", "-Crd", "--cpu-range-draft"], SPEC, "draft model CPU range", { hint: "lo-hi" }),
  refuse(G, ["--spec-draft-cpu-strict", "--cpu-strict-draft"], SPEC, "strict CPU placement for the draft model", { hint: "<0|1>" }),
  refuse(G, ["--spec-draft-prio", "--prio-draft"], SPEC, "draft model thread priority", { hint: "N" }),
  refuse(G, ["--spec-draft-poll", "--poll-draft"], SPEC, "draft model polling level", { hint: "<0|1>" }),
  refuse(G, ["--spec-draft-cpu-mask-batch", "-Cbd", "--cpu-mask-batch-draft"], SPEC, "draft model batch CPU affinity mask", { hint: "M" }),
  refuse(G, ["--spec-draft-cpu-strict-batch", "--cpu-strict-batch-draft"], SPEC, "strict CPU placement for the draft model's batches", { hint: "<0|1>" }),
  refuse(G, ["--spec-draft-prio-batch", "--prio-batch-draft"], SPEC, "draft model batch thread priority", { hint: "N" }),
  refuse(G, ["--spec-draft-poll-batch", "--poll-batch-draft"], SPEC, "draft model batch polling level", { hint: "<0|1>" }),
  refuse(G, ["--spec-draft-override-tensor", "-otd", "--override-tensor-draft"], SPEC, "tensor placement overrides for the draft model", { hint: "<tensor name pattern>=<buffer type>,..." }),
  refuse(G, ["--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft"], SPEC, "keep the draft model's expert weights in host memory", { env: "LLAMA_ARG_SPEC_DRAFT_CPU_MOE" }),
  refuse(G, ["--spec-draft-n-cpu-moe", "--spec-draft-ncmoe", "-ncmoed", "--n-cpu-moe-draft"], SPEC, "keep the draft model's experts of the first N layers in host memory", { hint: "N", env: "LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE" }),
  {
    names: ["--spec-draft-n-max"], hint: "N", env: "LLAMA_ARG_SPEC_DRAFT_N_MAX", key: "specDraftNMax", default: 3, value: { type: "int", min: 0, max: 256 },
    help: "draft model or MTP layer: most tokens drafted a step", group: G, support: "supported",
  },
  {
    names: ["--spec-draft-n-min"], hint: "N", env: "LLAMA_ARG_SPEC_DRAFT_N_MIN", key: "specDraftNMin", default: 0, value: { type: "int", min: 0, max: 256 },
    help: "draft model or MTP layer: fewest draft tokens worth verifying", group: G, support: "supported",
  },
  refuse(G, ["--spec-synth-len"], SPEC, "synthetic mean acceptance length (benchmarking)", { hint: "L", env: "LLAMA_ARG_SPEC_SYNTH_LEN" }),
  refuse(G, ["--spec-synth-rates"], SPEC, "synthetic per-position acceptance probabilities (benchmarking)", { hint: "P0,P1,...", env: "LLAMA_ARG_SPEC_SYNTH_RATES" }),
  refuse(G, ["--spec-draft-p-split", "--draft-p-split"], SPEC, "speculative split probability", { hint: "P", env: "LLAMA_ARG_SPEC_DRAFT_P_SPLIT", default: 0.1 }),
  {
    names: ["--spec-draft-p-min", "--draft-p-min"], hint: "P", env: "LLAMA_ARG_SPEC_DRAFT_P_MIN", key: "specDraftPMin", default: 0, value: { type: "float", min: 0, max: 1 },
    help: "draft model or MTP layer: least probability of a drafted token", group: G, support: "supported",
  },
  refuse(G, ["--spec-draft-backend-sampling"], SPEC, "sample the draft on the backend", { neg: ["--no-spec-draft-backend-sampling"], env: "LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING" }),
  refuse(G, ["--spec-draft-device", "-devd", "--device-draft"], SPEC, "devices for the draft model", { hint: "<dev1,dev2,..>" }),
  {
    names: ["--spec-draft-ngl", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft"], hint: "N", env: "LLAMA_ARG_N_GPU_LAYERS_DRAFT", key: "specDraftNgl", default: "auto",
    value: { type: "int", keywords: { auto: "auto", all: "all" } },
    help: "draft model: layers on the GPU (0: the CPU; default: as -ngl)", group: G, support: "supported",
  },
  {
    names: ["--spec-draft-model", "-md", "--model-draft"], hint: "FNAME", env: "LLAMA_ARG_SPEC_DRAFT_MODEL", key: "specDraftModel",
    value: { type: "string", nonEmpty: true },
    help: "draft model (GGUF, the target's vocabulary) for speculative decoding", group: G, support: "supported",
  },
  {
    names: ["--spec-type"], hint: "TYPES", env: "LLAMA_ARG_SPEC_TYPE", key: "specType", default: "none",
    value: { type: "string", nonEmpty: true },
    help: "speculative decoding: none, ngram-simple (drafts from the sequence), draft-simple (-md), draft-mtp (the file's MTP layer, or -md's)",
    group: G, support: "supported",
    check: (v) => specTypeProblem(String(v)),
  },
  refuse(G, ["--spec-ngram-mod-n-min"], SPEC, "ngram-mod: fewest ngram tokens", { hint: "N", default: 48 }),
  refuse(G, ["--spec-ngram-mod-n-max"], SPEC, "ngram-mod: most ngram tokens", { hint: "N", default: 64 }),
  refuse(G, ["--spec-ngram-mod-n-match"], SPEC, "ngram-mod: lookup length", { hint: "N", default: 24 }),
  {
    names: ["--spec-ngram-simple-size-n"], hint: "N", key: "specNgramSimpleSizeN", default: 12, value: { type: "int", min: 1, max: 1024 },
    help: "ngram-simple: lookup length", group: G, support: "supported",
  },
  {
    names: ["--spec-ngram-simple-size-m"], hint: "N", key: "specNgramSimpleSizeM", default: 48, value: { type: "int", min: 1, max: 1024 },
    help: "ngram-simple: longest draft", group: G, support: "supported",
  },
  {
    names: ["--spec-ngram-simple-min-hits"], hint: "N", key: "specNgramSimpleMinHits", default: 1, value: { type: "int", min: 1 },
    help: "ngram-simple: fewest hits (1: the latest occurrence)", group: G, support: "supported",
    check: (v) => (v === 1 ? undefined : "1 (ngram-simple drafts from the latest occurrence; more hits are not counted)"),
  },
  refuse(G, ["--spec-ngram-map-k-size-n"], SPEC, "ngram-map-k: lookup n-gram length", { hint: "N", default: 12 }),
  refuse(G, ["--spec-ngram-map-k-size-m"], SPEC, "ngram-map-k: draft m-gram length", { hint: "N", default: 48 }),
  refuse(G, ["--spec-ngram-map-k-min-hits"], SPEC, "ngram-map-k: fewest hits", { hint: "N", default: 1 }),
  refuse(G, ["--spec-ngram-map-k4v-size-n"], SPEC, "ngram-map-k4v: lookup n-gram length", { hint: "N", default: 12 }),
  refuse(G, ["--spec-ngram-map-k4v-size-m"], SPEC, "ngram-map-k4v: draft m-gram length", { hint: "N", default: 48 }),
  refuse(G, ["--spec-ngram-map-k4v-min-hits"], SPEC, "ngram-map-k4v: fewest hits", { hint: "N", default: 1 }),
  refuse(G, ["--draft", "--draft-n", "--draft-max"], removed("--spec-draft-n-max or --spec-ngram-mod-n-max"), "removed (draft tokens per step)", { hint: "N", env: "LLAMA_ARG_DRAFT_MAX" }),
  refuse(G, ["--draft-min", "--draft-n-min"], removed("--spec-draft-n-min or --spec-ngram-mod-n-min"), "removed (fewest draft tokens)", { hint: "N", env: "LLAMA_ARG_DRAFT_MIN" }),
  refuse(G, ["--spec-ngram-size-n"], removed("the --spec-ngram-*-size-n flag of the ngram kind"), "removed (ngram lookup length)", { hint: "N" }),
  refuse(G, ["--spec-ngram-size-m"], removed("the --spec-ngram-*-size-m flag of the ngram kind"), "removed (ngram draft length)", { hint: "N" }),
  refuse(G, ["--spec-ngram-min-hits"], removed("the --spec-ngram-*-min-hits flag of the ngram kind"), "removed (ngram fewest hits)", { hint: "N" }),
];
