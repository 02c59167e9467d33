// bloomery safetensors: a Hugging Face checkpoint folder as a model: config.json names the family
// (architectures[0] / model_type), whose HF mapping gives the GGUF metadata and tensors; the tensors
// are the folder's bytes in place (F32/F16/BF16 rows), the few a family must reshape copied at load.
import { statSync } from "node:fs";
import { dirname, join } from "node:path";
import { GgufFile, safeText, TYPE_INFO, type GgufHeader, type GgufTensorInfo } from "../gguf/index.ts";
import { FAMILIES } from "../models/registry.ts";
import type { ModelFamily } from "../models/types.ts";
import { JsonConfig, KvMap } from "./config.ts";
import { derive, DerivedWriter, ggmlTypeOf, stack, type Derived } from "./derive.ts";
import { isSafetensorsFolder, SafetensorsFolder } from "./folder.ts";
import { quantConfigOf, quantTensor } from "./quant-load.ts";
import { readSafetensorsHeader, SafetensorsError } from "./reader.ts";
import { generationKv } from "./generation.ts";
import { tokenizerKv } from "./tokenizer.ts";

/** The family a config.json names, or a clear refusal listing those that read folders. */
export function hfFamilyFor(file: string, cfg: JsonConfig): ModelFamily {
  const arch = cfg.strs("architectures")?.[0];
  const type = cfg.str("model_type", "");
  const fam = FAMILIES.find((f) => f.hf && ((arch && f.hf.architectures.includes(arch)) || f.hf.modelTypes.includes(type)));
  if (!fam) {
    const known = FAMILIES.flatMap((f) => f.hf?.architectures ?? []).join(", ");
    throw new SafetensorsError(file, `architecture '${safeText(arch ?? type)}' is not supported in a safetensors folder yet (supported: ${known})`);
  }
  return fam;
}

/** How a folder is opened: `copies: false` gives the tensors' types and shapes alone (a plan, --dry-run), making none of the load-time copies (their tensors then name no readable file). */
export interface HfOpenOptions {
  copies?: boolean;
  /** where load notes go (a quantized tensor dequantized at load, ...): stderr unless given */
  note?: (line: string) => void;
}

/** Open a checkpoint folder as the GGUF-shaped model the engine runs. */
export function openHfFolder(dir: string, o: HfOpenOptions = {}): GgufFile {
  const shapeOnly = o.copies === false;
  const folder = SafetensorsFolder.open(dir);
  const cfgFile = join(dir, "config.json");
  const raw = folder.json("config.json");
  if (!raw) throw new SafetensorsError(dir, "has no config.json: a checkpoint folder's config names its architecture");
  const cfg = new JsonConfig(cfgFile, raw);
  const fam = hfFamilyFor(cfgFile, cfg);
  const hf = fam.hf!;
  const kv = new KvMap();
  kv.str("general.architecture", fam.archs[0]);
  kv.str("general.name", dir.split("/").filter(Boolean).pop() ?? "model");
  hf.config(cfg, kv);
  generationKv(folder.json("generation_config.json"), kv);
  const specs = hf.tensors(cfg);
  const mapped: GgufTensorInfo[] = [];
  // tensors made at load: written to one file as each is made (shape only for a plan)
  const derived: { name: string; type: number; ne: number[]; offset: number }[] = [];
  const writer = new DerivedWriter();
  const put = (name: string, d: Derived) => derived.push({ name, type: d.type, ne: d.ne, offset: shapeOnly ? 0 : writer.append(d.data) });
  const qc = quantConfigOf(cfgFile, raw);
  // whether the folder holds an HF name (a stack by its first tensor; gpt-oss's MXFP4 as name_blocks)
  const holds = (n: string | string[]) => (Array.isArray(n) ? folder.tensors.has(n[0]) : folder.tensors.has(n) || folder.tensors.has(`${n}_blocks`));
  if (hf.mlxRefusal && (folder.headers.some((h) => h.metadata.get("format") === "mlx") || (typeof raw.quantization === "object" && raw.quantization !== null))) {
    throw new SafetensorsError(dir, hf.mlxRefusal);
  }
  const note = o.note ?? ((l: string) => process.stderr.write(`${l}\n`));
  try {
    for (const s0 of specs) {
      const s = s0.alt && !holds(s0.hf) && holds(s0.alt.hf) ? { name: s0.name, ...s0.alt } : s0;
      const q = quantTensor(folder, s, qc, shapeOnly, note);
      if (q) {
        put(s.name, q);
        continue;
      }
      if (Array.isArray(s.hf)) {
        put(s.name, stack(s, s.hf.map((n) => folder.require(n)), shapeOnly));
        continue;
      }
      const st = folder.require(s.hf);
      if (s.transpose || s.parity !== undefined || s.view || s.rows || s.gather || s.gatherLast || s.add !== undefined || s.negExp || (s.f32 && st.dtype !== "F32")) {
        put(s.name, derive(s, st, shapeOnly));
        continue;
      }
      const type = ggmlTypeOf(st.dtype);
      mapped.push({ name: s.name, type, ne: [...st.shape].reverse(), offset: st.fileOffset, nbytes: st.nbytes, fileOffset: st.fileOffset, file: st.file });
    }
  } catch (e) {
    writer.fail();
    throw e;
  }
  const emb = mapped.find((t) => t.name === "token_embd.weight") ?? derived.find((t) => t.name === "token_embd.weight");
  tokenizerKv(dir, kv, emb ? emb.ne[1] : cfg.int("vocab_size"), raw);
  const headers: GgufHeader[] = folder.headers.map((h, i) => ({
    path: h.path, version: 3, fileSize: h.fileSize, alignment: 1, dataOffset: h.dataOffset,
    kv: i === 0 ? kv.kv : new Map(), tensors: mapped.filter((t) => t.file === h.path),
  }));
  if (derived.length) {
    const w = shapeOnly ? undefined : writer.finish();
    const path = w?.path ?? `${dir} (tensors copied at load)`;
    const tensors = derived.map((x) => {
      const info = TYPE_INFO[x.type];
      const nbytes = (x.ne.reduce((a, b) => a * b, 1) / info.blockElems) * info.blockBytes;
      return { name: x.name, type: x.type, ne: x.ne, offset: x.offset, nbytes, fileOffset: x.offset, file: path };
    });
    if (w) headers.push({ path: w.path, version: 3, fileSize: w.size, alignment: 64, dataOffset: 0, kv: new Map(), tensors });
    else for (const t of tensors) headers[0].tensors.push(t);
  }
  return GgufFile.fromParts(headers);
}

/** Whether a model path names a checkpoint folder or a .safetensors file (read through its folder). */
export function isHfModelPath(path: string): boolean {
  try {
    const st = statSync(path);
    if (st.isDirectory()) return isSafetensorsFolder(path);
    return st.isFile() && path.endsWith(".safetensors");
  } catch {
    return false;
  }
}

/** A model path opened as what it is: a checkpoint folder (or a file of one), else a GGUF. */
export function openModelPath(path: string, o: HfOpenOptions = {}): GgufFile {
  if (!isHfModelPath(path)) return GgufFile.open(path);
  if (statSync(path).isDirectory()) return openHfFolder(path, o);
  readSafetensorsHeader(path); // a bad header is said for this file first
  return openHfFolder(dirname(path), o);
}
