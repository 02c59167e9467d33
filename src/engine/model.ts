// bloomery engine: a loaded model: its GGUF, family, hyper-parameters, mapped weights, encoded
// program and backend; `eval` runs a batch and returns logits.
import { availableParallelism } from "node:os";
import { GgufFile } from "../gguf/index.ts";
import { openModelPath } from "../safetensors/model.ts";
import { familyFor } from "../models/registry.ts";
import { tmpfsResidentBytes } from "./tmpfs.ts";
import type { HParams, ModelFamily } from "../models/types.ts";
import type { Backend, Batch } from "./backend.ts";
import { encodeProgram, hostExpertsMark, HOST_EXPERTS_DISK, markHostExperts, type EncodedProgram } from "./program.ts";
import { BackendFactory, chooseBackend, type GpuLayers } from "./placement.ts";
import { planLoad, type LoadPlan, type PlacementFlags } from "./plan.ts";
import { mtpMemoryOf, type MtpMemory } from "./mtp-memory.ts";
import { readRam } from "../cli/agent-machine.ts";
import { cudaDeviceInfo } from "../../ffi/cuda.ts";
import { MappedWeights } from "./weights.ts";
import { checkModelFile } from "./model-check.ts";
import { cpu } from "../../ffi/cpu.ts";
import { ExpertStore, routedExpertTensors, type ExpertStats } from "./expert-store.ts";
import { Tokenizer, vocabFromMetadata } from "../tokenizer/index.ts";

export interface LoadOptions {
  /** context per slot (0 = the model's training context) */
  nCtx?: number;
  nSlots?: number;
  /** largest batch per forward (llama's -ub) */
  maxTokens?: number;
  nThreads?: number;
  /** threads for batches (llama's -tb; default nThreads) */
  nThreadsBatch?: number;
  /** the slow exact reference path (f32 activations, dequantized weights) */
  exact?: boolean;
  /** llama's -ngl: 0 (the default here) = CPU; > 0, "auto", "all" = the CUDA card when present (placement.ts) */
  nGpuLayers?: GpuLayers;
  /** CUDA device index */
  device?: number;
  /** llama's placement flags and bloomery's budgets; when given, the load is planned (plan.ts) and the plan's line logged */
  placement?: PlacementFlags;
  /** the card's batch-invariant mode (the CPU path always is): a sequence's logits the same bits alone or batched */
  batchInvariant?: boolean;
  /** card slots a host-expert layer for promoted experts (0 = off; cuda/hybrid/promote.cu) */
  promoteSlots?: number;
  /** where the plan's line goes (default stderr) */
  log?: (line: string) => void;
  /**
   * RAM for routed experts read from the GGUF files on demand (the NVMe tier, expert-store.ts):
   * their pages are not prefaulted and the MoE blocks read them from a cache of this many bytes (on
   * the CPU every routed expert; beside a card the experts the plan leaves to the CPU). Undefined:
   * the plan's cache (its disk tier), else every tensor mapped and prefaulted.
   */
  expertRamBytes?: number;
  /** load the file's MTP layer as the model (ModelFamily.mtp: speculative decoding's draft-mtp), not its forward pass */
  mtp?: boolean;
  /**
   * draft-mtp will run beside this model: the plan (LoadOptions.placement) counts the MTP layer's tensors, KV
   * cache and buffers (mtp-memory.ts) of `file` (another file, -md's), else of this model's own file
   */
  planMtp?: { file?: string };
}

/** The family's MTP layer of this file, or an error naming why there is none this engine runs. */
export function mtpOf(family: ModelFamily, f: GgufFile): NonNullable<ModelFamily["mtp"]> {
  const arch = f.str("general.architecture");
  if (!family.mtp) throw new Error(`${f.path}: draft-mtp runs the MTP layer of qwen35moe, qwen3next, glm4moe and deepseek2 files; the ${arch} family's is not implemented`);
  if (!family.mtp.has(f)) throw new Error(`${f.path}: the ${arch} file has no MTP layer (nextn_predict_layers): draft-mtp needs one (use ngram-simple or a draft model, -md)`);
  return family.mtp;
}

export class Model {
  readonly gguf: GgufFile;
  readonly family: ModelFamily;
  readonly hp: HParams;
  readonly weights: MappedWeights;
  readonly program: EncodedProgram;
  readonly backend: Backend;
  readonly tokenizer: Tokenizer;
  /** makes further backends for this program (the card's weights uploaded once) */
  readonly backends: BackendFactory;
  /** the routed experts' RAM cache (LoadOptions.expertRamBytes) */
  readonly experts: ExpertStore | undefined;

  private constructor(src: string | GgufFile, o: LoadOptions) {
    this.gguf = typeof src === "string" ? openModelPath(src) : src;
    this.family = familyFor(this.gguf);
    // the file's MTP layer as the model (draft-mtp's drafter: the target's load checked the file and said its notes)
    const mtp = o.mtp ? mtpOf(this.family, this.gguf) : undefined;
    this.hp = mtp ? mtp.hparams(this.gguf) : this.family.hparams(this.gguf);
    const say = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
    if (!mtp) {
      for (const note of checkModelFile(this.gguf, this.hp)) say(note); // refuses a broken file
      for (const note of this.family.notes?.(this.gguf, this.hp) ?? []) say(note);
    }
    this.tokenizer = Tokenizer.fromVocab(vocabFromMetadata((k) => this.gguf.raw(k)));
    const nCtx = o.nCtx && o.nCtx > 0 ? o.nCtx : this.hp.nCtxTrain;
    const specs = mtp ? mtp.program(this.gguf, this.hp) : this.family.program(this.gguf, this.hp);
    // the tensors the forward pass reads: the rest (an MTP layer's, llama.cpp's nextn.*) is neither
    // planned nor prefaulted
    const used = new Set(specs.flatMap((op) => Object.values(op.tensors as Record<string, string | undefined>).filter((n): n is string => !!n)));
    this.plan = o.placement ? this.makePlan(o, nCtx, used) : undefined;
    const plan = this.plan;
    const onCard = plan?.backend === "cuda";
    // the RAM of the routed experts' cache: asked for, or what the plan leaves them (on the CPU the
    // routed experts past the host budget, beside a card the host experts past it)
    const expertRam = o.expertRamBytes ?? plan?.expertRamBytes;
    // the experts read from the files on demand: beside a card those the CPU runs (the plan's disk tier,
    // its first layers kept in host memory; every host expert when a cache is asked for and the plan put
    // none on disk)
    // (on the CPU: the plan's disk tier where it made one, its first layers kept in host memory; every
    // routed expert when a cache is asked for and the plan put none on disk)
    const planDisk = (plan?.disk.nExperts ?? 0) > 0;
    const onDisk = (n: string) =>
      expertRam !== undefined && (onCard ? plan.where.get(n) === "disk" || (!planDisk && plan.where.get(n) === "host") : !planDisk || plan!.where.get(n) === "disk");
    const routed = expertRam === undefined ? undefined : new Set([...routedExpertTensors(specs)].filter(onDisk));
    // the host experts beside a card in 2 MiB pages when asked (hugecopy.c; BLOOMERY_HOST_HUGEPAGES=1)
    const huge = onCard && hostHugePages() ? (t: { name: string }) => plan.where.get(t.name) === "host" && !onDisk(t.name) : undefined;
    this.weights = new MappedWeights(this.gguf, (t) => used.has(t.name) && !routed?.has(t.name), huge);
    // a failure past this point gives back what was mapped, read into huge pages or made (GiBs)
    let experts: ExpertStore | undefined, backends: BackendFactory | undefined;
    try {
      if (huge) {
        const h = this.weights.hugeBytes();
        if (h.bytes) (o.log ?? ((l: string) => process.stderr.write(`${l}\n`)))(`placement: host experts read into huge pages: ${gib(h.bytes)} GiB (${gib(h.backed)} GiB backed by 2 MiB pages)`);
      }
      this.program = encodeProgram(specs, (n) => this.weights.tensor(n), this.hp.nEmbd, this.hp.nVocab);
      // with a card: the routed experts the plan leaves to the CPU run beside it (cuda/hybrid/hybrid.cu), from
      // host memory or through the expert store
      if (onCard) markHostExperts(this.program, (n) => plan.where.get(n) === "host" && !onDisk(n), onDisk);
      const gateOf = (bi: number) => (specs[bi].tensors as Record<string, string | undefined>).gate;
      const blocks = onCard
        ? (bi: number) => hostExpertsMark(this.program, bi) === HOST_EXPERTS_DISK
        : planDisk ? (bi: number) => { const g = gateOf(bi); return !!g && onDisk(g); } : undefined;
      experts = expertRam === undefined ? undefined : ExpertStore.attach(this.gguf, specs, this.program, expertRam, { blocks });
      this.experts = experts;
      backends = new BackendFactory(this.hp, this.program);
      this.backends = backends;
      this.backend = backends.create({
        nSlots: o.nSlots ?? 1,
        nCtxSlot: nCtx,
        maxTokens: o.maxTokens ?? 512,
        nThreads: o.nThreads ?? Math.max(1, availableParallelism()),
        nThreadsBatch: o.nThreadsBatch,
        exact: o.exact,
        file: this.gguf.path,
      }, { nGpuLayers: o.nGpuLayers, device: o.device, exact: o.exact, cardBudgetBytes: o.placement?.cardBudgetBytes, log: o.log, batchInvariant: o.batchInvariant, promoteSlots: o.promoteSlots });
    } catch (e) {
      backends?.close();
      experts?.close();
      this.weights.close();
      throw e;
    }
  }

  /** The plan of this load (tiers of the weights), when LoadOptions.placement asked for one. */
  readonly plan: LoadPlan | undefined;

  /** Plan the load before anything is mapped: a plan that cannot run throws PlanError naming its terms. */
  private makePlan(o: LoadOptions, nCtx: number, used: ReadonlySet<string>): LoadPlan {
    const choice = chooseBackend(this.hp, { nGpuLayers: o.nGpuLayers, device: o.device, exact: o.exact });
    const ram = readRam();
    // the card's own fit (weights, KV cache, buffers against its free memory) is checked where
    // the card's sizes are known (placement.ts); the plan places tensors by the flags
    const tensors = [...this.gguf.tensors.values()].filter((t) => used.has(t.name));
    // a file on a tmpfs is RAM already: its tensors mapped in place take none beyond it (not with the
    // host experts copied into huge pages)
    const resident = hostHugePages() ? 0 : tmpfsResidentBytes(this.gguf, (n) => used.has(n));
    const plan = planLoad(this.hp, tensors.map((t) => ({ name: t.name, bytes: t.nbytes })), choice.kind, o.placement ?? {},
      { card: choice.kind === "cuda" ? cudaDeviceInfo(o.device ?? 0) : null, hostAvailableBytes: ram.usable_bytes + resident },
      { nSlots: o.nSlots ?? 1, nCtxSlot: nCtx, maxTokens: o.maxTokens ?? 512, nThreads: o.nThreads ?? Math.max(1, availableParallelism()), mtp: this.planMtp(o) });
    (o.log ?? ((l: string) => process.stderr.write(`${l}\n`)))(plan.line);
    return plan;
  }

  /** The MTP layer the plan counts beside this model (LoadOptions.planMtp), or undefined; refused by name where there is none. */
  private planMtp(o: LoadOptions): MtpMemory | undefined {
    if (!o.planMtp) return undefined;
    const file = o.planMtp.file;
    try {
      return file && file !== this.gguf.path ? mtpMemoryOf(openModelPath(file), false) : mtpMemoryOf(this.gguf);
    } catch (e) {
      throw new Error(`--spec-type draft-mtp (${file ?? this.gguf.path}): ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  /** Load a model from a path, or from a GGUF already opened (its header is not read twice). */
  static load(src: string | GgufFile, o: LoadOptions = {}): Model {
    return new Model(src, o);
  }

  /**
   * Evaluate tokens of one sequence starting at position `pos0`, in chunks of the backend's
   * batch size; returns the logits of the last token (or of every token when `all`).
   */
  evalSequence(tokens: ArrayLike<number>, pos0: number, slot = 0, all = false): Float32Array {
    const V = this.hp.nVocab, B = this.backend.maxTokens;
    const out = new Float32Array((all ? tokens.length : 1) * V);
    for (let s = 0; s < tokens.length; s += B) {
      const n = Math.min(B, tokens.length - s);
      const b: Batch = {
        tokens: Int32Array.from({ length: n }, (_, i) => tokens[s + i]),
        pos: Int32Array.from({ length: n }, (_, i) => pos0 + s + i),
        seq: new Int32Array(n).fill(slot),
        outRows: all ? Int32Array.from({ length: n }, (_, i) => i) : s + n === tokens.length ? Int32Array.of(n - 1) : new Int32Array(0),
        logits: all ? out.subarray(s * V, (s + n) * V) : out,
      };
      this.backend.forward(b);
    }
    return out;
  }

  /** The expert store's counters; undefined without one (LoadOptions.expertRamBytes). */
  expertStats(): ExpertStats | undefined {
    return this.experts?.stats();
  }

  close(): void {
    this.backend.close();
    this.backends.close();
    this.experts?.close();
    this.weights.close();
  }
}

/** Whether the host experts beside a card go into huge pages: asked for (BLOOMERY_HOST_HUGEPAGES=1)
 * and the kernel gives them (THP not "never"). Off by default: on the H200's host it gained nothing
 * (tg64 --cpu-moe 61.3 -> 62.3, --n-cpu-moe 24 106.9 -> 101.7, pp512 unchanged; with the pulled card
 * share of 3: 69.4 -> 60.9 and 122.5 -> 96.5) and costs a copy of the experts at load. */
function hostHugePages(): boolean {
  if (process.env.BLOOMERY_HOST_HUGEPAGES !== "1") return false;
  return Number(cpu().bl_huge_available()) === 1;
}

function gib(bytes: number): string {
  return (bytes / 2 ** 30).toFixed(2);
}
