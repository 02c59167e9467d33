// bloomery sampling: the Sampler of one request (llama.cpp common/sampling.cpp common_sampler):
// logit bias and bans, the stage chain in the request's order, then dist / Mirostat /
// adaptive-p with a seeded generator; a grammar restricts tokens as llama does (sample
// freely, and when the token is not allowed, sample again with the disallowed tokens masked);
// token probabilities for n_probs before or after the chain. Vocabulary-wide work is native
// (src/sampling/native.ts); JavaScript reads only the candidates a stage reaches.
import { dryBreakers, dryPenalties, type DryBreakers, type DryParams, type DryVocab } from "./dry.ts";
import { SamplingError, SamplingParamError } from "./errors.ts";
import { AdaptiveState, distList, distVirtualPicked, mirostat1, mirostat2, MirostatState, type Picked, type TokenProb } from "./final.ts";
import {
  CandList, dynamicTemperatureList, minPList, penaltiesList, subtractList, temperatureList, topKList, topNSigmaList,
  topPList, typicalList, xtcList,
} from "./list.ts";
import { nativeCandidates, type NativeOp } from "./native.ts";
import { resolveSamplingParams, type SamplingParams } from "./params.ts";
import { Mt19937, resolveSeed } from "./rng.ts";
import { compileStages, firstStatsDivisor, nativePrefixLength, penaltiesEnabled, type Stage, type StagePlan } from "./stages.ts";
import { FilteredSource, NativeSource, TopSource, TOP_CANDIDATES_MAX } from "./view.ts";
import {
  dynamicTemperatureVirtual, minPVirtual, temperatureVirtual, topKVirtual, topPVirtual, typicalVirtual, VirtualSet, xtcVirtual,
} from "./virtual.ts";

/** What the sampler needs from the vocabulary; a Tokenizer fits. */
export interface SamplerVocab {
  readonly nVocab: number;
  /** The bytes a token stands for (DRY sequence breakers are matched against them). */
  tokenBytes?(id: number): Uint8Array;
  /** Token ids of a text, no special tokens (DRY breakers that span tokens). */
  encode?(text: string): number[];
  /** End-of-generation tokens (banned by ignore_eos). */
  readonly eogIds?: readonly number[];
}

export interface SampleOptions {
  /** A grammar's verdict on a token; tokens it refuses are never returned. */
  readonly allowed?: (id: number) => boolean;
}

export interface SampleResult {
  readonly id: number;
  /**
   * The token's probability as llama-server reports it: with n_probs > 0 and
   * post_sampling_probs false, the softmax of the raw logits; otherwise its probability in
   * the set the chain drew it from.
   */
  readonly p: number;
  /** With n_probs > 0: the top n_probs tokens (raw softmax, or after the chain; see SamplingParams). */
  readonly probs?: TokenProb[];
}

const FIRST_K = 64;

/** Per-call view of the history: penalty counts and DRY penalties, computed when a stage asks. */
class History {
  private countsCache?: Map<number, number>;
  private dryCache?: Map<number, number>;
  constructor(
    private readonly tokens: readonly number[],
    private readonly p: SamplingParams,
    private readonly nVocab: number,
    private readonly breakers: DryBreakers | undefined,
  ) {}

  private window(n: number): readonly number[] {
    const w = n < 0 ? this.tokens : this.tokens.slice(Math.max(0, this.tokens.length - n));
    for (const t of w)
      if (!Number.isInteger(t) || t < 0 || t >= this.nVocab)
        throw new SamplingError(`sampling: history holds token ${String(t)}, outside the vocabulary (${this.nVocab})`);
    return w;
  }

  counts(): Map<number, number> {
    if (!this.countsCache) {
      const m = new Map<number, number>();
      if (this.p.repeatLastN !== 0) for (const t of this.window(this.p.repeatLastN)) m.set(t, (m.get(t) ?? 0) + 1);
      this.countsCache = m;
    }
    return this.countsCache;
  }

  dry(): Map<number, number> {
    if (!this.dryCache) {
      const dp: DryParams = {
        multiplier: this.p.dryMultiplier,
        base: this.p.dryBase,
        allowedLength: this.p.dryAllowedLength,
        penaltyLastN: this.p.dryPenaltyLastN,
      };
      this.dryCache = this.breakers ? dryPenalties(this.window(this.p.dryPenaltyLastN), dp, this.breakers) : new Map();
    }
    return this.dryCache;
  }
}

export class Sampler {
  readonly params: SamplingParams;
  /** The seed in use (a random one when the parameters ask for -1). */
  readonly seed: number;
  readonly nVocab: number;
  private readonly plan: StagePlan;
  private readonly prefixLen: number;
  /** Prefix used when sampling again under a grammar: top-n-sigma must see only allowed tokens. */
  private readonly maskedPrefixLen: number;
  private readonly biasOps: NativeOp[];
  private readonly top: { need: number; banned: ReadonlySet<number>; tdiv: number };
  private readonly breakers: DryBreakers | undefined;
  private readonly distRng: Mt19937;
  private readonly xtcRng: Mt19937;
  private readonly finalRng: Mt19937;
  private readonly mirostat: MirostatState;
  private readonly adaptive: AdaptiveState;
  /** Native passes made by the last sample() (measurement). */
  lastNativeCalls = 0;

  constructor(params: Partial<SamplingParams>, vocab: SamplerVocab) {
    this.params = resolveSamplingParams(params);
    const p = this.params;
    if (!Number.isInteger(vocab.nVocab) || vocab.nVocab <= 0 || vocab.nVocab > 2 ** 31 - 1)
      throw new SamplingError(`sampling: bad vocabulary size ${vocab.nVocab}`);
    this.nVocab = vocab.nVocab;
    this.plan = compileStages(p);
    this.prefixLen = nativePrefixLength(this.plan.stages);
    const ns = this.plan.stages.findIndex((s) => s.kind === "nsigma");
    this.maskedPrefixLen = ns >= 0 && ns < this.prefixLen ? ns : this.prefixLen;
    this.biasOps = this.makeBiasOps(vocab);
    this.top = this.planTop();
    if (this.plan.stages.some((s) => s.kind === "dry")) {
      if (!vocab.tokenBytes || !vocab.encode) throw new SamplingParamError("dry_multiplier", "DRY needs the vocabulary's token bytes and encoder");
      this.breakers = dryBreakers(vocab as DryVocab, p.drySequenceBreakers);
    }
    this.seed = resolveSeed(p.seed);
    this.distRng = new Mt19937(this.seed);
    this.xtcRng = new Mt19937(this.seed);
    this.finalRng = new Mt19937(this.seed);
    this.mirostat = new MirostatState(p.mirostatTau, p.mirostatEta);
    this.adaptive = new AdaptiveState(p.adaptiveTarget, p.adaptiveDecay);
  }

  private makeBiasOps(vocab: SamplerVocab): NativeOp[] {
    const p = this.params;
    const addIds: number[] = [];
    const addVals: number[] = [];
    const ban = new Set<number>();
    for (const b of p.logitBias) {
      if (b.id >= this.nVocab) throw new SamplingParamError("logit_bias", `token ${b.id} is outside the vocabulary (${this.nVocab})`);
      if (b.bias === -Infinity) ban.add(b.id);
      else if (b.bias !== 0) {
        addIds.push(b.id);
        addVals.push(b.bias);
      }
    }
    if (p.ignoreEos) {
      if (!vocab.eogIds) throw new SamplingParamError("ignore_eos", "the vocabulary does not list its end-of-generation tokens");
      for (const id of vocab.eogIds) if (id >= 0 && id < this.nVocab) ban.add(id);
    }
    const ops: NativeOp[] = [];
    if (addIds.length) ops.push({ kind: "add", ids: Int32Array.from(addIds), values: Float32Array.from(addVals) });
    if (ban.size) ops.push({ kind: "ban", ids: Int32Array.from(ban) });
    return ops;
  }

  /**
   * Samples the next token from `logits` (one row, n_vocab floats). `history` is the sequence
   * so far (prompt and generated tokens) for the repetition penalties and DRY. Throws
   * SamplingError for a row of the wrong size, NaN logits, or when no token can be sampled.
   */
  sample(logits: Float32Array, history: readonly number[], opts: SampleOptions = {}): SampleResult {
    if (!(logits instanceof Float32Array)) throw new SamplingError("sampling: logits must be a Float32Array");
    if (logits.length !== this.nVocab)
      throw new SamplingError(`sampling: logits row has ${logits.length} values, the vocabulary ${this.nVocab}`);
    const hist = new History(history, this.params, this.nVocab, this.breakers);
    this.lastNativeCalls = 0;
    let picked = this.pass(logits, hist, this.prefixLen, undefined);
    if (opts.allowed && !opts.allowed(picked.id)) picked = this.pass(logits, hist, this.maskedPrefixLen, opts.allowed);
    const n = this.params.nProbs;
    if (n <= 0) return { id: picked.id, p: picked.p };
    if (this.params.postSamplingProbs) return { id: picked.id, p: picked.p, probs: picked.top(n) };
    const raw = nativeCandidates(logits, [], n, 1);
    this.lastNativeCalls++;
    const st = raw.stats!;
    const probs: TokenProb[] = [];
    for (let i = 0; i < raw.ids.length; i++) probs.push({ id: raw.ids[i], p: Math.exp(raw.logits[i] - st.max) / st.z1, logit: raw.logits[i] });
    return { id: picked.id, p: Math.exp(logits[picked.id] - st.max) / st.z1, probs };
  }

  /**
   * How many of a row's best tokens (logit desc, id asc) decide this sampler's pick, when that is
   * at most TOP_CANDIDATES_MAX: the first cutting stage is top-k, only temperatures come before it,
   * the row-wide ops only ban tokens (ignore_eos, a bias of -inf), no probabilities are reported and
   * the last stage draws from the kept set. Then a backend may hand over its top candidates instead
   * of the row (sampleTop: the same pick). 0: the whole row is needed.
   */
  candidatesNeeded(): number {
    return this.top.need;
  }

  /** candidatesNeeded()'s answer, the tokens banned row-wide and the temperatures' product before top-k (the plan is fixed). */
  private planTop(): { need: number; banned: ReadonlySet<number>; tdiv: number } {
    const none = { need: 0, banned: new Set<number>(), tdiv: 1 };
    const { stages, final } = this.plan;
    if (final !== "dist" || this.params.nProbs > 0) return none;
    let tdiv = 1;
    for (let i = 0; i < this.prefixLen; i++) {
      const st = stages[i];
      if (st.kind !== "temp") return none;
      tdiv *= st.t;
    }
    const first = stages[this.prefixLen];
    if (first?.kind !== "top_k" || first.k <= 0) return none;
    const banned = new Set<number>();
    for (const op of this.biasOps) {
      if (op.kind !== "ban") return none;
      for (const id of op.ids) banned.add(id);
    }
    const need = first.k + banned.size;
    return need <= TOP_CANDIDATES_MAX && need <= this.nVocab ? { need, banned, tdiv } : none;
  }

  /**
   * Samples from a row's best tokens as a backend selected them (at least candidatesNeeded() of
   * them, logit desc, id asc): the same pick as sample() on the whole row. Throws SamplingError
   * when this sampler needs the whole row.
   */
  sampleTop(ids: Int32Array, logits: Float32Array, history: readonly number[]): SampleResult {
    const { need, banned, tdiv } = this.top;
    if (need === 0) throw new SamplingError("sampling: this request's samplers need the whole logits row");
    if (ids.length !== logits.length || ids.length < need) throw new SamplingError(`sampling: ${ids.length} candidates given, ${need} needed`);
    const keep: number[] = [];
    for (let i = 0; i < ids.length; i++) if (!banned.has(ids[i])) keep.push(i);
    const { stages } = this.plan;
    const src = new TopSource(Int32Array.from(keep, (i) => ids[i]), Float32Array.from(keep, (i) => logits[i]));
    const hist = new History(history, this.params, this.nVocab, this.breakers);
    this.lastNativeCalls = 0;
    let set: VirtualSet | CandList = new VirtualSet(src, 0, tdiv);
    for (let i = this.prefixLen; i < stages.length; i++) set = this.stage(set, stages[i], hist);
    const picked = this.finish(set);
    return { id: picked.id, p: picked.p };
  }

  /** Tells the stateful stages which token was taken (adaptive-p's moving average). */
  accept(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.nVocab) throw new SamplingError(`sampling: accepted token ${id} is outside the vocabulary`);
    this.adaptive.accept(id);
  }

  /** Back to the start state: generators reseeded with `seed`, Mirostat's mu and adaptive-p's average reset. */
  reset(): void {
    this.distRng.seed(this.seed);
    this.xtcRng.seed(this.seed);
    this.finalRng.seed(this.seed);
    this.mirostat.reset();
    this.adaptive.reset();
  }

  /** Mirostat's current mu (tests, diagnostics). */
  get mirostatMu(): number {
    return this.mirostat.mu;
  }

  private pass(logits: Float32Array, hist: History, prefixLen: number, allowed: ((id: number) => boolean) | undefined): Picked {
    const { stages, final } = this.plan;
    const ops: NativeOp[] = [...this.biasOps];
    let tdiv = 1;
    for (let i = 0; i < prefixLen; i++) {
      const s = stages[i];
      if (s.kind === "penalties") {
        const c = hist.counts();
        if (c.size === 0) continue;
        ops.push({
          kind: "penalty",
          ids: Int32Array.from(c.keys()),
          counts: Float32Array.from(c.values()),
          repeat: this.params.repeatPenalty,
          frequency: this.params.frequencyPenalty * tdiv,
          presence: this.params.presencePenalty * tdiv,
        });
      } else if (s.kind === "dry") {
        const d = hist.dry();
        if (d.size === 0) continue;
        ops.push({ kind: "add", ids: Int32Array.from(d.keys()), values: Float32Array.from(d.values(), (v) => -v * tdiv) });
      } else if (s.kind === "nsigma") ops.push({ kind: "nsigma", n: s.n });
      else if (s.kind === "temp") tdiv *= s.t;
    }
    const statsDiv = firstStatsDivisor(stages, prefixLen, tdiv, final);
    const first = stages[prefixLen];
    const k = first?.kind === "top_k" && !allowed ? first.k : Math.max(FIRST_K, first?.kind === "top_k" ? first.k : 0);
    const native = new NativeSource(logits, ops, k, statsDiv === undefined ? undefined : 1 / statsDiv);
    try {
      let set: VirtualSet | CandList = new VirtualSet(allowed ? new FilteredSource(native, allowed) : native, 0, tdiv);
      for (let i = prefixLen; i < stages.length; i++) set = this.stage(set, stages[i], hist);
      return this.finish(set);
    } finally {
      this.lastNativeCalls += native.calls;
    }
  }

  private stage(set: VirtualSet | CandList, s: Stage, hist: History): VirtualSet | CandList {
    const p = this.params;
    if (set instanceof VirtualSet) {
      switch (s.kind) {
        case "top_k":
          return topKVirtual(set, s.k);
        case "top_p":
          return topPVirtual(set, s.p, p.minKeep);
        case "min_p":
          return minPVirtual(set, s.p, p.minKeep);
        case "typical":
          return typicalVirtual(set, s.p, p.minKeep);
        case "xtc":
          return xtcVirtual(set, s.prob, s.thr, p.minKeep, this.xtcRng);
        case "temp":
          return temperatureVirtual(set, s.t);
        case "dyntemp":
          return dynamicTemperatureVirtual(set, s.t, s.delta, s.exponent);
        default:
          // penalties, DRY and top-n-sigma past the native prefix act on the whole set as a list.
          return this.stage(set.all(), s, hist);
      }
    }
    switch (s.kind) {
      case "top_k":
        topKList(set, s.k);
        break;
      case "top_p":
        topPList(set, s.p, p.minKeep);
        break;
      case "min_p":
        minPList(set, s.p, p.minKeep);
        break;
      case "typical":
        typicalList(set, s.p, p.minKeep);
        break;
      case "xtc":
        xtcList(set, s.prob, s.thr, p.minKeep, this.xtcRng);
        break;
      case "temp":
        temperatureList(set, s.t);
        break;
      case "dyntemp":
        dynamicTemperatureList(set, s.t, s.delta, s.exponent);
        break;
      case "nsigma":
        topNSigmaList(set, s.n);
        break;
      case "penalties":
        if (penaltiesEnabled(p)) penaltiesList(set, hist.counts(), p.repeatPenalty, p.frequencyPenalty, p.presencePenalty);
        break;
      case "dry":
        subtractList(set, hist.dry());
        break;
    }
    return set;
  }

  private finish(set: VirtualSet | CandList): Picked {
    switch (this.plan.final) {
      case "dist":
        return set instanceof CandList ? distList(set, this.distRng) : distVirtualPicked(set, this.distRng);
      case "mirostat1":
        return mirostat1(set, this.mirostat, this.nVocab, this.finalRng);
      case "mirostat2":
        return mirostat2(set, this.mirostat, this.finalRng);
      case "adaptive_p":
        return this.adaptive.pick(set instanceof CandList ? set : set.all(), this.finalRng);
    }
  }
}
