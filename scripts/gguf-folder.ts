// bloomery: a gpt-oss GGUF written out as openai's checkpoint folder (issue 29's folder-vs-GGUF runs on
// the GPU machine, where synth writes only GGUF): the routed experts as MXFP4 `*_blocks` / `*_scales`
// (output-major, gate and up interleaved in gate_up_proj, repacked byte for byte from GGUF's blocks), their
// biases F32, every other tensor as the GGUF stores it (F32, F16 or BF16; a quantized one is refused),
// config.json with `quantization_config` mxfp4, tokenizer.json / tokenizer_config.json from the GGUF's
// tokenizer. The model file is streamed (a 120b's 60 GiB never sits in memory).
// Usage: bun scripts/gguf-folder.ts MODEL.gguf OUT_DIR
import { closeSync, mkdirSync, openSync, readSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { GgufFile } from "../src/gguf/index.ts";

const QWEN2_SPLIT = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** A tensor of the folder: its header entry and the writer of exactly `nbytes` bytes. */
interface Part {
  name: string;
  dtype: string;
  shape: number[];
  nbytes: number;
  write(out: (b: Uint8Array) => void): void;
}

/** One model.safetensors from the parts, streamed (header first, the data 8-aligned after it). */
export function writeSafetensorsStream(path: string, parts: Part[]): void {
  const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
  let off = 0;
  for (const p of parts) {
    header[p.name] = { dtype: p.dtype, shape: p.shape, data_offsets: [off, off + p.nbytes] };
    off += p.nbytes;
  }
  const json = JSON.stringify(header);
  const hb = new TextEncoder().encode(json + " ".repeat((8 - (new TextEncoder().encode(json).length % 8)) % 8));
  const fd = openSync(path, "w");
  try {
    const len = new Uint8Array(8);
    new DataView(len.buffer).setBigUint64(0, BigInt(hb.length), true);
    writeSync(fd, len);
    writeSync(fd, hb);
    for (const p of parts) {
      let n = 0;
      p.write((b) => {
        writeSync(fd, b);
        n += b.length;
      });
      if (n !== p.nbytes) throw new Error(`${p.name}: wrote ${n} bytes, its header says ${p.nbytes}`);
    }
  } finally {
    closeSync(fd);
  }
}

/** The GGUF's tokenizer as tokenizer.json (byte-level BPE, the qwen2 split synth writes) and tokenizer_config.json. */
export function writeTokenizerFiles(g: GgufFile, out: string): void {
  const pre = g.str("tokenizer.ggml.pre", "qwen2");
  if (pre !== "qwen2") throw new Error(`${g.path}: the pre-tokenizer '${pre}' has no tokenizer.json form here (qwen2 has)`);
  const tokens = g.raw("tokenizer.ggml.tokens") as string[], types = g.raw("tokenizer.ggml.token_type") as Int32Array;
  const vocab: Record<string, number> = {};
  const added: unknown[] = [];
  tokens.forEach((s, i) => {
    vocab[s] = i;
    if (types[i] === 3 || types[i] === 4) added.push({ id: i, content: s, single_word: false, lstrip: false, rstrip: false, normalized: false, special: types[i] === 3 });
  });
  writeFileSync(join(out, "tokenizer.json"), JSON.stringify({
    version: "1.0", added_tokens: added, normalizer: null,
    pre_tokenizer: { type: "Sequence", pretokenizers: [{ type: "Split", pattern: { Regex: QWEN2_SPLIT }, behavior: "Isolated", invert: false }, { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false }] },
    model: { type: "BPE", vocab, merges: (g.raw("tokenizer.ggml.merges") as string[]).map((m) => m.split(" ")) },
  }));
  writeFileSync(join(out, "tokenizer_config.json"), JSON.stringify({
    bos_token: tokens[g.int("tokenizer.ggml.bos_token_id")], eos_token: tokens[g.int("tokenizer.ggml.eos_token_id")],
    add_bos_token: g.bool("tokenizer.ggml.add_bos_token"), chat_template: g.str("tokenizer.chat_template"),
  }));
}

const DTYPE: Record<number, string> = { 0: "F32", 1: "F16", 30: "BF16" };
const MXFP4 = 39;
const CHUNK = 64 << 20;

/** The gpt-oss GGUF (MXFP4 experts; F32 / F16 / BF16 elsewhere) as openai's folder in out. */
export function exportGptOssFolder(g: GgufFile, out: string): void {
  const A = "gpt-oss";
  if (g.str("general.architecture") !== A) throw new Error(`${g.path}: not a gpt-oss file`);
  mkdirSync(out, { recursive: true });
  const n = g.u32(`${A}.block_count`), X = g.u32(`${A}.expert_count`), E = g.u32(`${A}.embedding_length`), F = g.u32(`${A}.expert_feed_forward_length`);
  const fds = new Map<string, number>();
  const fdOf = (file: string) => fds.get(file) ?? (fds.set(file, openSync(file, "r")), fds.get(file)!);
  const read = (file: string, at: number, n2: number): Uint8Array => {
    const b = new Uint8Array(n2);
    let got = 0;
    while (got < n2) got += readSync(fdOf(file), b, got, n2 - got, at + got);
    return b;
  };
  const tensor = (name: string) => {
    const t = g.tensor(name);
    if (!t) throw new Error(`${g.path}: ${name} is missing`);
    return t;
  };
  const parts: Part[] = [];
  // a tensor as stored, its shape reversed (ne0 last)
  const plain = (gg: string, hf: string) => {
    const t = tensor(gg);
    const dtype = DTYPE[t.type];
    if (!dtype) throw new Error(`${gg}: type ${t.type} has no folder form (F32, F16 or BF16; MXFP4 for the experts)`);
    const shape = [...t.ne].reverse();
    while (shape.length > 1 && shape[0] === 1) shape.shift();
    parts.push({
      name: hf, dtype, shape, nbytes: t.nbytes,
      write: (w) => { for (let at = 0; at < t.nbytes; at += CHUNK) w(read(t.file, t.fileOffset + at, Math.min(CHUNK, t.nbytes - at))); },
    });
  };
  // MXFP4 experts: rows of GGUF blocks (the E8M0 byte, then byte j = element j low, j + 16 high) as
  // openai's blocks (byte k = element 2k low, 2k + 1 high) and scales; rows(x) the GGUF rows of expert x in order
  const mxfp4 = (hf: string, cols: number, outRows: number, rows: (x: number) => { t: ReturnType<typeof tensor>; r: number }[]) => {
    const nb = cols / 32, rowBytes = nb * 17;
    const expertRows = (x: number, each: (row: Uint8Array) => void) => {
      const rs = rows(x);
      for (const { t, r } of rs) each(read(t.file, t.fileOffset + r * rowBytes, rowBytes));
    };
    parts.push({
      name: `${hf}_blocks`, dtype: "U8", shape: [X, outRows, nb, 16], nbytes: X * outRows * nb * 16,
      write: (w) => {
        for (let x = 0; x < X; x++) {
          const o = new Uint8Array(outRows * nb * 16);
          let at = 0;
          expertRows(x, (row) => {
            for (let b = 0; b < nb; b++) {
              const s = b * 17 + 1;
              for (let k = 0; k < 16; k++) {
                const nib = (m: number) => (m < 16 ? row[s + m] & 15 : row[s + m - 16] >> 4);
                o[at + k] = nib(2 * k) | (nib(2 * k + 1) << 4);
              }
              at += 16;
            }
          });
          w(o);
        }
      },
    });
    parts.push({
      name: `${hf}_scales`, dtype: "U8", shape: [X, outRows, nb], nbytes: X * outRows * nb,
      write: (w) => {
        for (let x = 0; x < X; x++) {
          const o = new Uint8Array(outRows * nb);
          let at = 0;
          expertRows(x, (row) => { for (let b = 0; b < nb; b++) o[at++] = row[b * 17]; });
          w(o);
        }
      },
    });
  };
  // F32 bias rows, gate and up interleaved where both are given
  const biases = (hf: string, srcs: string[], width: number) => {
    const ts = srcs.map(tensor);
    for (const t of ts) if (t.type !== 0) throw new Error(`${t.name}: F32 expected`);
    parts.push({
      name: hf, dtype: "F32", shape: [X, width * ts.length], nbytes: X * width * ts.length * 4,
      write: (w) => {
        const rows = ts.map((t) => new Float32Array(read(t.file, t.fileOffset, t.nbytes).buffer));
        const o = new Float32Array(X * width * ts.length);
        for (let x = 0; x < X; x++) for (let f = 0; f < width; f++) for (let k = 0; k < ts.length; k++) o[(x * width + f) * ts.length + k] = rows[k][x * width + f];
        w(new Uint8Array(o.buffer));
      },
    });
  };
  plain("token_embd.weight", "model.embed_tokens.weight");
  for (let i = 0; i < n; i++) {
    const p = `blk.${i}.`, h = `model.layers.${i}.`;
    plain(`${p}attn_norm.weight`, `${h}input_layernorm.weight`);
    for (const [gx, x] of [["q", "q"], ["k", "k"], ["v", "v"], ["output", "o"]]) {
      plain(`${p}attn_${gx}.weight`, `${h}self_attn.${x}_proj.weight`);
      plain(`${p}attn_${gx}.bias`, `${h}self_attn.${x}_proj.bias`);
    }
    plain(`${p}attn_sinks.weight`, `${h}self_attn.sinks`);
    plain(`${p}post_attention_norm.weight`, `${h}post_attention_layernorm.weight`);
    plain(`${p}ffn_gate_inp.weight`, `${h}mlp.router.weight`);
    plain(`${p}ffn_gate_inp.bias`, `${h}mlp.router.bias`);
    const gate = tensor(`${p}ffn_gate_exps.weight`), up = tensor(`${p}ffn_up_exps.weight`), down = tensor(`${p}ffn_down_exps.weight`);
    for (const t of [gate, up, down]) if (t.type !== MXFP4) throw new Error(`${t.name}: MXFP4 expected (the folder's experts are openai's MXFP4)`);
    // gate_up_proj: output rows 2f (gate f) and 2f + 1 (up f) of each expert
    mxfp4(`${h}mlp.experts.gate_up_proj`, E, 2 * F, (x) => Array.from({ length: 2 * F }, (_, r) => ({ t: r % 2 ? up : gate, r: x * F + (r >> 1) })));
    biases(`${h}mlp.experts.gate_up_proj_bias`, [`${p}ffn_gate_exps.bias`, `${p}ffn_up_exps.bias`], F);
    mxfp4(`${h}mlp.experts.down_proj`, F, E, (x) => Array.from({ length: E }, (_, r) => ({ t: down, r: x * E + r })));
    biases(`${h}mlp.experts.down_proj_bias`, [`${p}ffn_down_exps.bias`], E);
  }
  plain("output_norm.weight", "model.norm.weight");
  const tied = !g.tensor("output.weight");
  if (!tied) plain("output.weight", "lm_head.weight");
  try {
    writeSafetensorsStream(join(out, "model.safetensors"), parts);
  } finally {
    for (const fd of fds.values()) closeSync(fd);
  }
  const k = (s: string) => g.u32(`${A}.${s}`);
  const raw = g.has(`${A}.attention.sliding_window_pattern`) ? Array.from(g.raw(`${A}.attention.sliding_window_pattern`) as ArrayLike<number>, (v) => !!v) : undefined;
  const rope: Record<string, unknown> = { rope_theta: g.f32(`${A}.rope.freq_base`), rope_type: "default" };
  if (g.str(`${A}.rope.scaling.type`, "") === "yarn") {
    Object.assign(rope, {
      rope_type: "yarn", factor: g.f32(`${A}.rope.scaling.factor`), original_max_position_embeddings: k("rope.scaling.original_context_length"),
      beta_fast: g.f32(`${A}.rope.scaling.yarn_beta_fast`, 32), beta_slow: g.f32(`${A}.rope.scaling.yarn_beta_slow`, 1),
    });
  }
  writeFileSync(join(out, "config.json"), JSON.stringify({
    architectures: ["GptOssForCausalLM"], model_type: "gpt_oss", num_hidden_layers: n, max_position_embeddings: k("context_length"),
    hidden_size: E, intermediate_size: F, num_attention_heads: k("attention.head_count"), num_key_value_heads: k("attention.head_count_kv"),
    head_dim: k("attention.key_length"), rms_norm_eps: g.f32(`${A}.attention.layer_norm_rms_epsilon`), num_local_experts: X,
    num_experts_per_tok: k("expert_used_count"), sliding_window: k("attention.sliding_window"),
    // llama's default without the key: the even layers through the window
    layer_types: Array.from({ length: n }, (_, i) => ((raw ? raw[i] : i % 2 === 0) ? "sliding_attention" : "full_attention")),
    rope_parameters: rope, tie_word_embeddings: tied, vocab_size: tensor("token_embd.weight").ne[1],
    quantization_config: { quant_method: "mxfp4", modules_to_not_convert: ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"] },
  }, null, 2));
  writeTokenizerFiles(g, out);
}

if (import.meta.main) {
  const [src, out] = process.argv.slice(2);
  if (!src || !out) {
    console.error("usage: bun scripts/gguf-folder.ts MODEL.gguf OUT_DIR   (a gpt-oss GGUF with MXFP4 experts)");
    process.exit(2);
  }
  const t0 = performance.now();
  exportGptOssFolder(GgufFile.open(src), out);
  console.log(`gguf-folder: ${src} -> ${out} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
