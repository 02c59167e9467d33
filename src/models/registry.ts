// bloomery models: the registry of model families by `general.architecture`.
import { GgufError, type GgufFile } from "../gguf/index.ts";
import { deepseek2 } from "./deepseek2.ts";
import { glm4moe } from "./glm4moe.ts";
import { gptOss } from "./gpt-oss.ts";
import { qwen35moe } from "./qwen35moe.ts";
import { qwen3moe } from "./qwen3moe.ts";
import { qwen3next } from "./qwen3next.ts";
import type { ModelFamily } from "./types.ts";

export const FAMILIES: readonly ModelFamily[] = [qwen3moe, gptOss, glm4moe, deepseek2, qwen35moe, qwen3next];

export function familyFor(f: GgufFile): ModelFamily {
  const arch = f.str("general.architecture");
  const fam = FAMILIES.find((m) => m.archs.includes(arch));
  if (!fam) {
    const known = FAMILIES.flatMap((m) => m.archs).join(", ");
    throw new GgufError(f.path, `architecture '${arch}' is not supported (supported: ${known})`);
  }
  return fam;
}
