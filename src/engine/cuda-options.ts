// bloomery engine: the CUDA library's options of a context (ffi/bloomery.h bl_cuda_options) - their
// defaults, the environment knobs that set them (the one place they are read: the native library
// reads no environment; docs/cuda.md lists them) and their slots for bl_cuda_weights_new / ctx_new.
import { ptr } from "bun:ffi";
import { CUDA_OPTION_FIELDS, Slots, type CudaOptionName } from "../../ffi/layout.ts";

/** bl_cuda_options by field (bloomery.h says what each holds); trace_path is a file name ("" none). */
export type CudaOptions = { [K in Exclude<CudaOptionName, "trace_path">]: number } & { trace_path: string };

/** The library's defaults (cuda/runtime/ctx.cu cu_options_default has the same). */
export const CUDA_OPTION_DEFAULTS: Readonly<CudaOptions> = {
  fast: -1, invariant: 0, graphs: 1, pdl: 1, carveout: -1, prefill_min: 0, mma_pairs: -1,
  mv_batch: 1, moe_batch: 1, a2_long_heads: 0, a2_long_chunk: 0, a2_mma_class: -1, fa2_heads: 0, fmv_rpw: 0, expert_bn64: 0,
  profile: 0, trace_path: "", host_pin: 1, hybrid_lead: -1, hybrid_lead_mb: 0, upload_min: -1, host_share: -1, sparse_upload: -1,
  card_share: -1, promote_slots: 0, mailbox: 1, pull: 1, spin: 1, cpu_tokens: -1, cpu_cap: 0,
};

/** C's atoi / atof: leading blanks, a sign, the digits that follow; 0 without any. */
const atoi = (v: string): number => {
  const n = Number.parseInt(v.trim(), 10);
  return Number.isFinite(n) ? n : 0;
};
const atof = (v: string): number => {
  const n = Number.parseFloat(v.trim());
  return Number.isFinite(n) ? n : 0;
};
const off = (v: string): boolean => v.startsWith("0");

/**
 * An environment knob: its variable, what it sets, and whether it is a tuning knob a user may set
 * (tune) or a measurement / debugging one for A/B and probe runs (probe). Each reads as the native
 * library read it before (cuda/*.cu getenv), so the same values mean the same.
 */
export interface CudaEnvKnob {
  env: string;
  kind: "tune" | "probe";
  doc: string;
  set(o: CudaOptions, v: string): void;
}

export const CUDA_ENV_KNOBS: readonly CudaEnvKnob[] = [
  { env: "BLOOMERY_CUDA_FAST", kind: "probe", doc: "the kernels in use, bits of CudaFast (ffi/cuda.ts; 0: the general kernels only)", set: (o, v) => { o.fast = atoi(v) & 0x7fffffff; } },
  { env: "BLOOMERY_CUDA_GRAPHS", kind: "tune", doc: "0: decode steps launch every kernel (no captured graphs)", set: (o, v) => { if (off(v)) o.graphs = 0; } },
  { env: "BLOOMERY_CUDA_PDL", kind: "probe", doc: "0: no programmatic dependent launch", set: (o, v) => { if (off(v)) o.pdl = 0; } },
  { env: "BLOOMERY_CUDA_CARVEOUT", kind: "probe", doc: "percent of L1 every kernel prefers as shared memory (-1: the driver's)", set: (o, v) => { const n = atoi(v); if (n >= -1 && n <= 100) o.carveout = n; } },
  { env: "BLOOMERY_CUDA_PREFILL_MIN", kind: "probe", doc: "batches of at least this many tokens take the prompt kernels (2..9)", set: (o, v) => { const n = atoi(v); if (n >= 2 && n <= 9) o.prefill_min = n; } },
  { env: "BLOOMERY_CUDA_MMA_PAIRS", kind: "probe", doc: "decode batches' experts on the tensor cores from this many pairs an expert (3 by default; 0: always)", set: (o, v) => { o.mma_pairs = Math.max(0, Math.trunc(atof(v) * 1000)); } },
  { env: "BLOOMERY_CUDA_MV_BATCH", kind: "probe", doc: "0: decode batches' dense products token by token", set: (o, v) => { if (off(v)) o.mv_batch = 0; } },
  { env: "BLOOMERY_CUDA_MOE_BATCH", kind: "probe", doc: "0: decode batches' experts pair by pair", set: (o, v) => { if (off(v)) o.moe_batch = 0; } },
  {
    env: "BLOOMERY_CUDA_A2_LONG", kind: "probe", doc: "\"heads,chunk\": one token's attention over long contexts, heads a block (1, 2, 4, 8) and positions a slice (64..128)",
    set: (o, v) => {
      const m = /^\s*([+-]?\d+)\s*,\s*([+-]?\d+)/.exec(v);
      if (m) { o.a2_long_heads = Number(m[1]); o.a2_long_chunk = Number(m[2]); }
    },
  },
  { env: "BLOOMERY_CUDA_A2_MMA_CLASS", kind: "probe", doc: "the first context class (0..4) of one token's attention on the tensor cores (4: never)", set: (o, v) => { if (/^[0-4]$/.test(v)) o.a2_mma_class = Number(v); } },
  { env: "BLOOMERY_FA2_HEADS", kind: "probe", doc: "prompt attention's query heads a block (1 or 2; unset: by the grid)", set: (o, v) => { o.fa2_heads = atoi(v); } },
  { env: "BLOOMERY_CUDA_FMV_RPW", kind: "probe", doc: "rows a warp of one token's mid-sized products (1..8; 2 by default)", set: (o, v) => { o.fmv_rpw = atoi(v); } },
  { env: "BLOOMERY_CUDA_EXPERT_BN64", kind: "probe", doc: "prompt experts take 64-wide tiles from this many pairs an expert (20 by default)", set: (o, v) => { o.expert_bn64 = Math.max(0, atoi(v)); } },
  { env: "BLOOMERY_CUDA_PROFILE", kind: "tune", doc: "1: time each section of the steps (graphs off), printed when the context is freed", set: (o, v) => { if (!off(v)) o.profile = 1; } },
  { env: "BLOOMERY_CUDA_TRACE", kind: "probe", doc: "a file kernel timelines are appended to (builds with BLOOMERY_CUDA_TRACE_BUILD)", set: (o, v) => { o.trace_path = v; } },
  { env: "BLOOMERY_HOST_PIN", kind: "tune", doc: "0: the host experts' pages are not registered with the driver", set: (o, v) => { if (off(v)) o.host_pin = 0; } },
  { env: "BLOOMERY_HYBRID_LEAD", kind: "probe", doc: "lead staging slots of sparse upload steps (0..5; as many as 2 GiB hold by default)", set: (o, v) => { o.hybrid_lead = Math.max(0, atoi(v)); } },
  { env: "BLOOMERY_HYBRID_LEAD_MB", kind: "probe", doc: "MiB of the next batch's leads copied after each light layer (24 by default)", set: (o, v) => { o.hybrid_lead_mb = Math.max(0, atoi(v)); } },
  { env: "BLOOMERY_HYBRID_UPLOAD_MIN", kind: "tune", doc: "batches of at least this many tokens upload their host experts (0: never; the cost model by default)", set: (o, v) => { o.upload_min = Math.max(0, atoi(v)); } },
  { env: "BLOOMERY_HYBRID_HOST_SHARE", kind: "probe", doc: "of an upload step's host layers, the share (0..0.9) the CPU runs meanwhile (the cost model by default)", set: (o, v) => { o.host_share = Math.round(1000 * Math.min(0.9, Math.max(0, atof(v)))); } },
  { env: "BLOOMERY_HYBRID_SPARSE", kind: "probe", doc: "1: upload steps copy the used experts only, 0: whole layers (by the last step's share by default)", set: (o, v) => { o.sparse_upload = atoi(v) !== 0 ? 1 : 0; } },
  { env: "BLOOMERY_HYBRID_CARD_SHARE", kind: "tune", doc: "picks of a token the card computes in host layers (a number: fixed; auto: sized by measuring both sides first)", set: (o, v) => { o.card_share = v === "auto" ? -2 : Math.max(0, atoi(v)); } },
  { env: "BLOOMERY_PROMOTE_SLOTS", kind: "tune", doc: "card slots a host layer for promoted experts (as --promote-slots; the flag table reads it too)", set: (o, v) => { if (atoi(v) > 0) o.promote_slots = atoi(v); } },
  { env: "BLOOMERY_HYBRID_MAILBOX", kind: "probe", doc: "0: the host experts' hand-off by stream callbacks", set: (o, v) => { if (off(v)) o.mailbox = 0; } },
  { env: "BLOOMERY_HYBRID_PULL", kind: "probe", doc: "0: the card reads its share of the host experts in place", set: (o, v) => { if (off(v)) o.pull = 0; } },
  { env: "BLOOMERY_HYBRID_SPIN", kind: "probe", doc: "0: sparse layers wait for their picks blocking", set: (o, v) => { if (off(v)) o.spin = 0; } },
  { env: "BLOOMERY_HYBRID_CPU_TOKENS", kind: "probe", doc: "sparse prompt layers give the CPU the experts with at most twice this many tokens (0: off)", set: (o, v) => { o.cpu_tokens = Math.max(0, atoi(v)); } },
  { env: "BLOOMERY_HYBRID_CPU_CAP", kind: "probe", doc: "the CPU share's time cap, a factor of the copies left to the card (1 by default)", set: (o, v) => { if (atof(v) > 0) o.cpu_cap = atof(v); } },
];

/** The options the environment gives over the defaults (knobs set to "" are unset, as before). */
export function cudaOptionsFromEnv(env: Record<string, string | undefined> = process.env): CudaOptions {
  const o: CudaOptions = { ...CUDA_OPTION_DEFAULTS };
  for (const k of CUDA_ENV_KNOBS) {
    const v = env[k.env];
    if (v !== undefined && v !== "") k.set(o, v);
  }
  return o;
}

/** The options laid out as bl_cuda_options; `keep` holds the trace path's bytes (alive for the call). */
export function cudaOptionSlots(o: CudaOptions): { slots: Slots; keep?: Buffer } {
  const s = new Slots(CUDA_OPTION_FIELDS.length);
  let keep: Buffer | undefined;
  CUDA_OPTION_FIELDS.forEach(([name, kind], i) => {
    if (name === "trace_path") {
      if (o.trace_path) {
        keep = Buffer.from(`${o.trace_path}\0`, "utf8");
        s.setInt(i, ptr(keep));
      } else s.setInt(i, 0);
    } else if (kind === "f") s.setFloat(i, o[name]);
    else s.setInt(i, Math.trunc(o[name]));
  });
  return { slots: s, keep };
}
