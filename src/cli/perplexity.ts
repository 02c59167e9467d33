// `bloomery-serve perplexity`: llama-perplexity on bloomery's engine, in-process: a text's
// perplexity over chunks of -c tokens (the second half of each scored, the running figure a chunk,
// llama's final estimate and uncertainty), --kl-divergence-base FILE to save the scored rows'
// log-probabilities in llama's file format, and --kl-divergence to compare a model (or a
// placement) with such a file. Text on stdout and stderr as llama-perplexity prints it, or one
// JSON object with --json.
import { readFileSync } from "node:fs";
import { cpuPath, usableCores } from "../../ffi/cpu-kernels.ts";
import { Model } from "../engine/model.ts";
import { PROMOTE_AUTO } from "../engine/promote-fit.ts";
import { GgufFile } from "../gguf/index.ts";
import { openModelPath } from "../safetensors/model.ts";
import { Tokenizer, vocabFromMetadata } from "../tokenizer/index.ts";
import { HYBRID_UBATCH } from "../server/engine-options.ts";
import { tableHelp } from "./flag-help.ts";
import type { Env } from "./flag-parse.ts";
import { ChunkEvaluator, chunkLayout, type ChunkLayout } from "./perplexity-eval.ts";
import { parsePerplexityArgs, PERPLEXITY_TABLE, type PerplexityParams } from "./perplexity-flags.ts";
import { LogitsFileError, LogitsReader, LogitsWriter, PackedChunk } from "./perplexity-logits.ts";
import { fg, fx, jsonEstimate, KLD_HEADER, kldChunkLine, kldRunning, kldStats, kldStatsText } from "./perplexity-report.ts";
import { kldRow, KldSums, packRow, pplEstimate, rowNll } from "./perplexity-score.ts";

/** The smallest chunk: a slot's minimum context. */
const MIN_CTX = 16;

const out = (s: string) => process.stdout.write(s);
const err = (s: string) => process.stderr.write(s);

export class PerplexityError extends Error {
  override readonly name = "PerplexityError";
}

export async function runPerplexity(argv: string[], env: Env): Promise<number> {
  const p = parsePerplexityArgs(argv, env);
  if (!p) {
    out(tableHelp(PERPLEXITY_TABLE, "bloomery-serve perplexity -m FILE -f TEXT [-c N] [-b N] [--chunks N] [--kl-divergence-base FILE [--kl-divergence]] [options]"));
    return 0;
  }
  try {
    return p.klDivergence ? klDivergence(p) : perplexity(p);
  } catch (e) {
    if (e instanceof PerplexityError) {
      err(`${e.message}\n`);
      return 1;
    }
    if (e instanceof LogitsFileError) {
      err(`${p.klDivergence ? "kl_divergence" : "perplexity"}: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}

interface Loaded {
  model: Model;
  loadMs: number;
}

/** The model with a context of layout.nSeq sequences of nCtx tokens, placed as the flags ask. */
function load(p: PerplexityParams, gguf: GgufFile, layout: ChunkLayout, func: string): Loaded {
  const threads = p.threads > 0 ? p.threads : usableCores();
  const expertFlags = p.cpuMoe || p.nCpuMoe > 0 || p.overrides.some((o) => /^cpu/i.test(o.buffer));
  // routed experts in host RAM beside a card: larger forwards amortise each layer's upload (engine-options.ts)
  const ub = p.nGpuLayers !== 0 && expertFlags && !p.ubatchGiven ? HYBRID_UBATCH : p.nUbatch;
  const t0 = performance.now();
  const model = Model.load(gguf, {
    nCtx: layout.nCtx, nSlots: layout.nSeq, maxTokens: Math.min(ub, layout.nBatch),
    nThreads: threads, nThreadsBatch: p.threadsBatch > 0 ? p.threadsBatch : threads, exact: p.exact,
    nGpuLayers: p.nGpuLayers, device: p.device, batchInvariant: p.batchInvariant,
    promoteSlots: p.promoteSlots ?? (p.nGpuLayers !== 0 && !expertFlags ? PROMOTE_AUTO : 0),
    placement: {
      nGpuLayers: p.nGpuLayers, cpuMoe: p.cpuMoe, nCpuMoe: p.nCpuMoe, overrides: p.overrides,
      hostBudgetBytes: p.hostBudgetMiB > 0 ? p.hostBudgetMiB * 2 ** 20 : undefined,
      cardBudgetBytes: p.cardBudgetMiB > 0 ? p.cardBudgetMiB * 2 ** 20 : undefined,
    },
  });
  const loadMs = performance.now() - t0;
  const total = layout.nSeq * layout.nCtx;
  if (total > model.hp.nCtxTrain) err(`${func}: model was trained on only ${model.hp.nCtxTrain} context tokens (${total} specified)\n`);
  err(`\nsystem_info: n_threads = ${threads} / ${usableCores()} | ${model.backend.name} : ${model.backend.name === "CPU" ? `${cpuPath()} path` : "on the card"}\n`);
  return { model, loadMs };
}

function openModel(path: string): { gguf: GgufFile; tok: Tokenizer } {
  const gguf = openModelPath(path);
  const tok = Tokenizer.fromVocab(vocabFromMetadata((k) => gguf.raw(k)));
  if (tok.addEos) throw new PerplexityError("perplexity: the vocabulary adds an end-of-sequence token to each text (add_eos_token); llama-perplexity refuses such models too");
  return { gguf, tok };
}

/** llama's "N seconds per pass - ETA" after the first decode calls: on stderr, the minutes on stdout. */
function eta(func: string, seconds: number, nChunk: number, nSeq: number): void {
  err(`${func}: ${fx(seconds, 2)} seconds per pass - ETA `);
  let total = Math.trunc((seconds * nChunk) / nSeq);
  let s = "";
  if (total >= 3600) {
    s += `${Math.floor(total / 3600)} hours `;
    total %= 3600;
  }
  out(`${s}${fx(total / 60, 2)} minutes\n`);
}

function perf(func: string, loadMs: number, evalMs: number, tokens: number, totalMs: number): void {
  err(`${func}_perf: load time = ${fx(loadMs, 2)} ms\n`);
  err(`${func}_perf: eval time = ${fx(evalMs, 2)} ms / ${tokens} tokens (${fx(evalMs / tokens, 2)} ms per token, ${fx((1000 * tokens) / evalMs, 2)} tokens per second)\n`);
  err(`${func}_perf: total time = ${fx(totalMs, 2)} ms\n`);
}

function perplexity(p: PerplexityParams): number {
  const t00 = performance.now();
  const F = "perplexity";
  if (p.nCtx < MIN_CTX) throw new PerplexityError(`${F}: -c ${p.nCtx}: a chunk is at least ${MIN_CTX} tokens`);
  let text: string;
  try {
    text = readFileSync(p.file!, "utf8");
  } catch (e) {
    throw new PerplexityError(`error: failed to open file '${p.file}': ${e instanceof Error ? e.message : String(e)}`);
  }
  const { gguf, tok } = openModel(p.model);
  err(`${F}: tokenizing the input ..\n`);
  const t1 = performance.now();
  const tokens = Int32Array.from(tok.encode(text, { addSpecial: true }));
  err(`${F}: tokenization took ${fg(performance.now() - t1)} ms\n`);
  const nCtx = p.nCtx;
  if (tokens.length < 2 * nCtx)
    throw new PerplexityError(`${F}: you need at least ${2 * nCtx} tokens to evaluate perplexity with a context of ${nCtx}\n` +
      `${F}: the data file you provided tokenizes to only ${tokens.length} tokens`);
  const nChunkMax = Math.floor(tokens.length / nCtx);
  const nChunk = p.chunks < 0 ? nChunkMax : Math.min(p.chunks, nChunkMax);
  if (nChunk < 1) throw new PerplexityError(`${F}: --chunks ${p.chunks}: nothing to score`);
  const layout = chunkLayout(nCtx, p.nBatch);
  const { model, loadMs } = load(p, gguf, layout, F);
  let writer: LogitsWriter | undefined;
  try {
    const V = model.hp.nVocab;
    if (p.logitsFile) {
      writer = new LogitsWriter(p.logitsFile, nCtx, V, nChunk, tokens);
      err(`${F}: saving all logits to ${p.logitsFile}\n`);
    }
    err(`${F}: calculating perplexity over ${nChunk} chunks, n_ctx=${nCtx}, batch_size=${layout.nBatch}, n_seq=${layout.nSeq}\n`);
    const ev = new ChunkEvaluator(model.backend, V, layout, tok.addBos ? tok.bos : undefined);
    const packed = writer ? new PackedChunk(nCtx, V) : undefined;
    const { first, nRows } = layout;
    let nll = 0, nll2 = 0, count = 0;
    const running: number[] = [];
    let lines = "";
    const sink = (c: number, row: number, l: Float32Array, o: number) => {
      const t = tokens[c * nCtx + first + row + 1];
      const v = packed ? packRow(l, o, V, t, packed.q, packed.qf, row * packed.rowLength) : rowNll(l, o, V, t);
      nll += v;
      nll2 += v * v;
      if (row !== nRows - 1) return;
      count += nRows;
      if (packed) writer!.writeChunk(packed);
      running.push(Math.exp(nll / count));
      if (p.outputType === 0) lines += `[${c + 1}]${fx(Math.exp(nll / count), 4)},`;
      else {
        const av = nll / count;
        let av2 = nll2 / count - av * av;
        if (av2 > 0) av2 = Math.sqrt(av2 / (count - 1));
        lines += `${String(c * nCtx).padStart(8)}  ${fx(Math.exp(nll / count), 4)}  ${fx(av, 6)}  ${fx(av2, 6)}\n`;
      }
    };
    const te = performance.now();
    for (let i = 0; i < nChunk; i += layout.nSeq) {
      const t0 = performance.now();
      ev.group(tokens, i, Math.min(layout.nSeq, nChunk - i), sink);
      if (i === 0 && !p.json) eta(F, (performance.now() - t0) / 1000, nChunk, layout.nSeq);
      if (!p.json) out(lines);
      lines = "";
    }
    const evalMs = performance.now() - te;
    const est = pplEstimate(nll, nll2, count);
    if (p.json) {
      out(JSON.stringify({
        mode: "perplexity", model: p.model, backend: model.backend.name, n_ctx: nCtx, n_batch: layout.nBatch, n_seq: layout.nSeq,
        n_tokens: tokens.length, n_chunk: nChunk, scored: count, add_bos: tok.addBos, ...estimateFields(est),
        chunks: running, logits_file: p.logitsFile ?? null,
        timings: timings(loadMs, evalMs, ev),
      }) + "\n");
    } else {
      out("\n");
      if (Number.isFinite(est.err)) err(`Final estimate: PPL = ${fx(est.value, 4)} +/- ${fx(est.err, 5)}\n`);
      else err("Unexpected negative standard deviation of log(prob)\n");
      out("\n");
    }
    perf(F, loadMs, evalMs, ev.evaluated, performance.now() - t00);
    return 0;
  } finally {
    writer?.close();
    model.close();
  }
}

function timings(loadMs: number, evalMs: number, ev: ChunkEvaluator) {
  return { load_ms: loadMs, eval_ms: evalMs, forward_ms: ev.forwardMs, score_ms: evalMs - ev.forwardMs, tokens: ev.evaluated, tokens_per_second: (1000 * ev.evaluated) / evalMs };
}

function estimateFields(e: { value: number; err: number }): { ppl: number; ppl_err: number | null } {
  return { ppl: e.value, ppl_err: Number.isFinite(e.err) ? e.err : null };
}

function klDivergence(p: PerplexityParams): number {
  const t00 = performance.now();
  const F = "kl_divergence";
  const reader = new LogitsReader(p.logitsFile!);
  try {
    return klWith(p, reader, F, t00);
  } finally {
    reader.close();
  }
}

function klWith(p: PerplexityParams, reader: LogitsReader, F: string, t00: number): number {
  const nCtx = reader.nCtx;
  if (nCtx < MIN_CTX) throw new PerplexityError(`${F}: ${reader.path} was computed with n_ctx=${nCtx}; a chunk is at least ${MIN_CTX} tokens`);
  if (p.given.has("ctxSize") && p.nCtx !== nCtx) err(`${F}: ${reader.path} was computed with n_ctx=${nCtx}; using it (-c ${p.nCtx} is not used)\n`);
  if (p.file) err(`${F}: -f ${p.file} is not used: the tokens come from ${reader.path}\n`);
  const nChunk = p.chunks < 0 ? reader.nChunk : Math.min(p.chunks, reader.nChunk);
  if (nChunk < 1) throw new PerplexityError(`${F}: --chunks ${p.chunks}: nothing to score`);
  if (nChunk > reader.completeChunks)
    throw new PerplexityError(`${F}: ${reader.path} holds the rows of ${reader.completeChunks} of its ${reader.nChunk} chunks (cut short?); --chunks ${reader.completeChunks} compares those`);
  const { gguf, tok } = openModel(p.model);
  const layout = chunkLayout(nCtx, p.nBatch);
  const { model, loadMs } = load(p, gguf, layout, F);
  try {
    const V = model.hp.nVocab;
    if (reader.nVocab !== V) throw new PerplexityError(`${F}: inconsistent vocabulary (${reader.nVocab} in ${reader.path} vs ${V} in ${p.model})`);
    const bad = reader.tokens.subarray(0, nChunk * nCtx).findIndex((t) => t < 0 || t >= V);
    if (bad >= 0) throw new PerplexityError(`${F}: ${reader.path}: token ${bad} is ${reader.tokens[bad]}, outside the vocabulary of ${V}`);
    err(`${F}: computing over ${nChunk} chunks, n_ctx=${nCtx}, batch_size=${layout.nBatch}, n_seq=${layout.nSeq}\n`);
    const ev = new ChunkEvaluator(model.backend, V, layout, tok.addBos ? tok.bos : undefined);
    const { first, nRows } = layout;
    const base = new PackedChunk(nCtx, V);
    const s = new KldSums();
    const kld = new Float32Array(nRows * nChunk), dp = new Float32Array(nRows * nChunk);
    const tokens = reader.tokens;
    const chunks: ReturnType<typeof kldRunning>[] = [];
    let lines = "";
    const sink = (c: number, row: number, l: Float32Array, o: number) => {
      if (row === 0) reader.readChunk(base, c);
      kldRow(l, o, V, tokens[c * nCtx + first + row + 1], base.q, base.qf, row * base.rowLength, s, kld, dp, c * nRows + row);
      if (row !== nRows - 1) return;
      const r = kldRunning(s);
      chunks.push(r);
      lines += kldChunkLine(c + 1, r);
    };
    const te = performance.now();
    for (let i = 0; i < nChunk; i += layout.nSeq) {
      const t0 = performance.now();
      ev.group(tokens, i, Math.min(layout.nSeq, nChunk - i), sink);
      if (i === 0 && !p.json) {
        eta(F, (performance.now() - t0) / 1000, nChunk, layout.nSeq);
        out(`\n${KLD_HEADER}`);
      }
      if (!p.json) out(lines);
      lines = "";
    }
    const evalMs = performance.now() - te;
    kld.sort();
    dp.sort();
    const st = kldStats(s, kld, dp);
    if (p.json) {
      const pct = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, Number.isFinite(v) ? v : null]));
      out(JSON.stringify({
        mode: "kl-divergence", model: p.model, base: reader.path, backend: model.backend.name, n_ctx: nCtx, n_batch: layout.nBatch,
        n_seq: layout.nSeq, n_chunk: nChunk, scored: s.count,
        ppl: jsonEstimate(st.ppl), ppl_base: jsonEstimate(st.pplBase), cor_ln_ppl: Number.isFinite(st.corLnPpl) ? st.corLnPpl : null,
        ln_ppl_ratio: jsonEstimate(st.lnPplRatio), ppl_ratio: jsonEstimate(st.pplRatio), ppl_diff: jsonEstimate(st.pplDiff),
        kld: { ...jsonEstimate(st.kld), percentiles: pct(st.kldPercentiles) },
        delta_p: { ...jsonEstimate(st.dp), percentiles: pct(st.dpPercentiles) }, rms_delta_p: jsonEstimate(st.rmsDp),
        same_top_p: jsonEstimate(st.sameTop), same_top: s.nSameTop, max_abs_delta_p: s.maxPDiff,
        chunks: chunks.map((r, i) => ({
          chunk: i + 1, ppl: jsonEstimate(r.ppl), ln_ppl_ratio: jsonEstimate(r.lnPplRatio), kld: jsonEstimate(r.kld),
          rms_delta_p: jsonEstimate(r.rmsDp), same_top_p: jsonEstimate(r.sameTop),
        })),
        timings: timings(loadMs, evalMs, ev),
      }) + "\n");
    } else {
      out("\n");
      // llama prints no statistics over fewer than 100 rows
      if (s.count >= 100) out(kldStatsText(st));
      out("\n");
    }
    perf(F, loadMs, evalMs, ev.evaluated, performance.now() - t00);
    return 0;
  } finally {
    model.close();
  }
}
