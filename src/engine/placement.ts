// bloomery engine: where a model runs - the CPU or one CUDA card - from -ngl and what the
// machine has. -ngl 0 (or the exact reference path) is the CPU; -ngl > 0, "auto" or "all" is the
// card when a usable one is present (else the CPU, with a line saying why). A model that does not
// fit the card is refused naming the sizes (with "auto": the CPU, with that line). The card's
// weights are uploaded once per factory and shared by the backends it makes.
import type { HParams } from "../models/types.ts";
import type { Backend } from "./backend.ts";
import { CpuBackend, type CpuBackendOptions } from "./cpu-backend.ts";
import { CudaBackend, CudaWeights, cudaPlanBytes, cudaUnsupported } from "./cuda-backend.ts";
import { HOST_EXPERTS_DISK, hostExpertOps, type EncodedProgram } from "./program.ts";
import { CudaOption, cudaDeviceInfo, cudaStatus } from "../../ffi/cuda.ts";
import { usableCores } from "../../ffi/cpu-kernels.ts";
import { fitPromoteSlots, hostExpertBytes, PROMOTE_AUTO } from "./promote-fit.ts";

export type GpuLayers = number | "auto" | "all";

export interface PlacementOptions {
  /** llama's -ngl: 0 = CPU; > 0, "auto", "all" = the card when present (llama-bench's -1 = auto) */
  nGpuLayers?: GpuLayers;
  /** CUDA device index (default 0) */
  device?: number;
  /** the exact reference path (CPU only) */
  exact?: boolean;
  /** replay decode steps as CUDA graphs (default true) */
  graphs?: boolean;
  /** the card's batch-invariant mode (CudaBackendOptions.batchInvariant); the CPU always is */
  batchInvariant?: boolean;
  /** card slots a host-expert layer for promoted experts (--promote-slots; 0 = off; PROMOTE_AUTO = what the card has left, promote-fit.ts) */
  promoteSlots?: number;
  /** cores the host experts' pool leaves free when BLOOMERY_HOST_SPARE_CORES is not set (default HOST_SPARE_CORES) */
  hostSpareCores?: number;
  /** plan as if the card had at most this many bytes free (--card-budget) */
  cardBudgetBytes?: number;
  /** where placement notes go (default stderr) */
  log?: (line: string) => void;
}

export class PlacementError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PlacementError";
  }
}

const GiB = 1024 ** 3;
const gib = (n: number) => `${(n / GiB).toFixed(2)} GiB`;

export type BackendKind = "cpu" | "cuda";

/** Which backend the options ask for on this machine, and a note saying why (empty if plain). */
export function chooseBackend(hp: HParams, o: PlacementOptions): { kind: BackendKind; note: string } {
  const ngl = o.nGpuLayers ?? 0;
  if (ngl === 0) return { kind: "cpu", note: "" };
  if (typeof ngl === "number" && ngl < 0 && ngl !== -1) throw new PlacementError(`-ngl ${ngl}: expected a layer count, auto or all`);
  if (o.exact) return { kind: "cpu", note: "placement: the exact reference path runs on the CPU only; every layer runs on the CPU" };
  const st = cudaStatus();
  if (!st.ok) return { kind: "cpu", note: `placement: no usable CUDA device (${st.reason}); every layer runs on the CPU` };
  if (typeof ngl === "number" && ngl > 0 && ngl < hp.nLayer + 1)
    return { kind: "cuda", note: `placement: -ngl ${ngl}: splitting a model between the CPU and the card is not implemented yet; all ${hp.nLayer} layers go to the card` };
  return { kind: "cuda", note: "" };
}

/**
 * Makes backends for one model program: the CPU backend, or CUDA contexts sharing one upload
 * of the weights. Close it after the backends it made.
 */
/** Cores the host experts' pool leaves to the rest of the process when -t asks for (nearly) all of them. */
export const HOST_SPARE_CORES = 2;

/**
 * Threads of the host experts' pool: -t, but never the last HOST_SPARE_CORES of 6 or more usable
 * cores - its workers are pinned one a core and meet at barriers, so one core taken by the HTTP
 * thread or a client stalls every layer (measured on the H200 host: 23 tok/s at -t 16 of 16, 45 at 14).
 */
export function hostExpertThreads(nThreads: number, cores: number, spare = hostSpareCores(HOST_SPARE_CORES)): number {
  if (cores < 6) return Math.max(1, nThreads);
  return Math.max(1, Math.min(nThreads, cores - spare));
}

/** BLOOMERY_HOST_SPARE_CORES (0..8) when set, else fallback. */
export function hostSpareCores(fallback: number): number {
  const v = Number(process.env.BLOOMERY_HOST_SPARE_CORES);
  return process.env.BLOOMERY_HOST_SPARE_CORES && Number.isInteger(v) && v >= 0 && v <= 8 ? v : fallback;
}

/** --promote-slots auto (promote-fit.ts): the card's room after the weights and this context (already made). */
function autoPromoteSlots(hp: HParams, prog: EncodedProgram, ctx: { nSlots: number; nCtxSlot: number; maxTokens: number }, dev: number, cardBudget?: number) {
  const need = cudaPlanBytes(hp, prog, ctx);
  const info = cudaDeviceInfo(dev);
  const budget = cardBudget !== undefined && cardBudget < info.freeBytes + need.weights + need.context;
  return fitPromoteSlots({
    ...hostExpertBytes(prog), availableBytes: budget ? cardBudget : info.freeBytes + need.weights + need.context, availableText: budget ? "--card-budget" : "free",
    weightBytes: need.weights, contextBytes: need.context, freeNowBytes: info.freeBytes, nExpert: hp.nExpert, nExpertUsed: hp.nExpertUsed, where: info.name,
  });
}

export class BackendFactory {
  private weights: CudaWeights | undefined;
  private said = new Set<string>();

  constructor(
    private readonly hp: HParams,
    private readonly prog: EncodedProgram,
  ) {}

  /**
   * The card bytes of the weights and of a context of ctxOpts. Where they do not fit (weights and
   * context within weightsRoom, the context within ctxRoom), the host experts' lead staging slots,
   * a speed-up of sparse uploads (cuda/runtime/ctx.cu), are cut to what fits, none at the least:
   * lead is then the slots the context takes (undefined: the library's default).
   */
  private contextNeed(ctxOpts: { nSlots: number; nCtxSlot: number; maxTokens: number }, need: { weights: number; context: number }, weightsRoom: number, ctxRoom = Infinity): { weights: number; context: number; lead?: number } {
    const fits = (n: { weights: number; context: number }) => n.weights + n.context <= weightsRoom && n.context <= ctxRoom;
    if (fits(need) || hostExpertOps(this.prog) === 0) return need;
    for (let lead = 4; lead > 0; lead--) {
      const n = cudaPlanBytes(this.hp, this.prog, ctxOpts, { hybrid_lead: lead });
      if (fits(n)) return { ...n, lead };
    }
    return { ...cudaPlanBytes(this.hp, this.prog, ctxOpts, { hybrid_lead: 0 }), lead: 0 };
  }

  create(cpu: CpuBackendOptions, o: PlacementOptions = {}): Backend {
    const out = o.log ?? ((l: string) => process.stderr.write(`${l}\n`));
    const log = (l: string) => {
      if (this.said.has(l)) return; // once per factory (a benchmark makes many backends)
      this.said.add(l);
      out(l);
    };
    const choice = chooseBackend(this.hp, o);
    if (choice.note) log(choice.note);
    if (choice.kind === "cpu") return new CpuBackend(this.hp, this.prog, cpu);
    const dev = o.device ?? 0;
    const ctxOpts = { nSlots: cpu.nSlots, nCtxSlot: cpu.nCtxSlot, maxTokens: cpu.maxTokens };
    let sized: { weights: number; context: number } | undefined; // the library's default sizes, once a create
    if (!this.weights || this.weights.device !== dev) {
      // an op the card's kernels do not run is refused by name (auto falls back to the CPU, saying why)
      const unsupported = cudaUnsupported(this.prog);
      if (unsupported) {
        const msg = `the card cannot run this model: ${unsupported}; use -ngl 0 to run it on the CPU`;
        if (o.nGpuLayers !== "auto" && o.nGpuLayers !== -1) throw new PlacementError(msg);
        log(`placement: ${msg.replace(/; use -ngl 0.*$/, "")}; every layer runs on the CPU`);
        return new CpuBackend(this.hp, this.prog, cpu);
      }
      const info = cudaDeviceInfo(dev);
      const margin = 512 * 1024 ** 2;
      const free = Math.min(info.freeBytes, o.cardBudgetBytes ?? Infinity);
      sized = cudaPlanBytes(this.hp, this.prog, ctxOpts);
      const need = this.contextNeed(ctxOpts, sized, free - margin);
      const budget = free < info.freeBytes ? `the --card-budget of ${gib(free)} (${gib(info.freeBytes)} free of ${gib(info.totalBytes)})` : `the ${gib(info.freeBytes)} free of ${gib(info.totalBytes)}`;
      if (need.weights + need.context + margin > free) {
        const msg = `the model does not fit ${info.name}: weights ${gib(need.weights)} + KV cache and buffers ${gib(need.context)} ` +
          `(${cpu.nSlots} slot(s) of ${cpu.nCtxSlot} positions) + ${gib(margin)} kept free need more than ${budget}; ` +
          "use -ngl 0 to run on the CPU, or a smaller context (-c)";
        if (o.nGpuLayers !== "auto" && o.nGpuLayers !== -1) throw new PlacementError(msg);
        log(`placement: ${msg}; every layer runs on the CPU`);
        return new CpuBackend(this.hp, this.prog, cpu);
      }
      this.weights?.close();
      this.weights = new CudaWeights(this.prog, dev);
      log(`placement: ${this.hp.nLayer} layers on ${info.name} (CUDA device ${dev}): weights ${gib(need.weights)}, KV cache and buffers ${gib(need.context)}`);
    }
    // the weights already on the card (an earlier context made them): this context against the
    // budget beside them and against what the card has left
    sized ??= cudaPlanBytes(this.hp, this.prog, ctxOpts);
    const room = Math.min(cudaDeviceInfo(dev).freeBytes, (o.cardBudgetBytes ?? Infinity) - sized.weights) - 512 * 1024 ** 2;
    const need = this.contextNeed(ctxOpts, sized, Infinity, room);
    if (need.context > room && o.cardBudgetBytes !== undefined)
      throw new PlacementError(`this context does not fit beside the weights within the --card-budget of ${gib(o.cardBudgetBytes)}: KV cache and buffers ${gib(need.context)} ` +
        `(${cpu.nSlots} slot(s) of ${cpu.nCtxSlot} positions) > the ${gib(Math.max(0, room))} left; give a smaller context (-c) or a larger --card-budget`);
    const hostThreads = hostExpertThreads(cpu.nThreads, usableCores(), hostSpareCores(o.hostSpareCores ?? HOST_SPARE_CORES));
    const be = new CudaBackend(this.hp, this.weights, { ...ctxOpts, graphs: o.graphs, batchInvariant: o.batchInvariant, hostThreads, cuda: need.lead !== undefined ? { hybrid_lead: need.lead } : undefined });
    let hs = be.hostStats();
    let slots = o.promoteSlots ?? hs?.promoteSlots ?? 0; // unset: what BLOOMERY_PROMOTE_SLOTS gave the context
    if (slots === PROMOTE_AUTO) {
      const f = hs ? autoPromoteSlots(this.hp, this.prog, ctxOpts, dev, o.cardBudgetBytes) : undefined;
      if (f) log(`placement: ${f.line}`);
      slots = f?.slots ?? 0;
    }
    if (slots > 0 && !hs) log("placement: --promote-slots: every routed expert is on the card; nothing to promote");
    if (hs && slots !== hs.promoteSlots) {
      try {
        be.setOption(CudaOption.promoteSlots, slots);
      } catch (e) {
        be.close();
        throw e;
      }
      hs = be.hostStats();
    }
    const onDisk = hs ? hostExpertOps(this.prog, HOST_EXPERTS_DISK) : 0;
    const inRam = (hs?.blocks ?? 0) - onDisk;
    if (hs)
      log(`placement: the routed experts of ${inRam > 0 ? `${inRam} layers stay in host memory (${hs.pinned ? "pinned" : "not pinned"})` : ""}` +
        `${inRam > 0 && onDisk > 0 ? " and " : ""}${onDisk > 0 ? `${onDisk} layers are read from the file into the CPU's RAM cache` : ""}, run by ${hostThreads} CPU threads ` +
        `${hostThreads < cpu.nThreads ? `(of -t ${cpu.nThreads}: ${cpu.nThreads - hostThreads} cores are left to the card's host thread, the server and its clients) ` : ""}` +
        `(${hs.pairUs.toFixed(1)} us a token's expert, measured); batches of ${hs.uploadMin >= 2 ** 30 ? "any size" : `${hs.uploadMin}+ tokens`} ` +
        `${hs.uploadMin >= 2 ** 30 ? "run them there" : `upload a layer's experts instead (PCIe ${(hs.pcieBytesPerSec / 1e9).toFixed(1)} GB/s, measured)`}` +
        `${hs.promoteSlots > 0 ? `; promotion: ${hs.promoteSlots} card slots a layer for the most used experts` :
          hs.cardShare > 0 && hs.pinned ? `; one-token steps: the card ${hs.copied ? "copies" : "reads"} ${hs.cardShare} of a token's picks from host memory while the CPU computes the rest` +
          (hs.cpuPickUs > 0 ? ` (sized by measurement: the CPU ${hs.cpuFixedUs.toFixed(0)} us a call + ${hs.cpuPickUs.toFixed(0)} us a pick, the card's copy ${hs.cardPickUs.toFixed(0)} us a pick)` : "") : ""}`);
    return be;
  }

  close(): void {
    this.weights?.close();
    this.weights = undefined;
  }
}
