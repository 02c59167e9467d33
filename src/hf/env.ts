// bloomery hf: hub settings from the environment, as llama.cpp and huggingface_hub read them:
// endpoint MODEL_ENDPOINT / HF_ENDPOINT, token HF_TOKEN (else the token file `hf auth login`
// writes: HF_TOKEN_PATH, HF_HOME/token, ~/.cache/huggingface/token), HF_HUB_OFFLINE, cache root.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { homedir } from "node:os";
import { hubCacheDir, type Env } from "./cache.ts";
import { DEFAULT_ENDPOINT } from "./api.ts";

export interface HfEnvOptions {
  endpoint: string;
  /** "" when no token is configured */
  token: string;
  offline: boolean;
  cacheDir: string;
}

function nonEmpty(v: string | undefined): string | undefined {
  return v !== undefined && v.trim() !== "" ? v.trim() : undefined;
}

/** The token file huggingface_hub's login writes, when present. */
function tokenFile(env: Env): string {
  const home = nonEmpty(env.HOME) ?? homedir();
  const hfHome = nonEmpty(env.HF_HOME) ?? join(nonEmpty(env.XDG_CACHE_HOME) ?? join(home, ".cache"), "huggingface");
  const path = nonEmpty(env.HF_TOKEN_PATH) ?? join(hfHome, "token");
  try {
    return readFileSync(path, "utf8").trim();
  } catch {
    return "";
  }
}

/** Read the hub settings from `env` (flags given on the command line override these). */
export function hfOptionsFromEnv(env: Env = process.env): HfEnvOptions {
  const offlineVar = (nonEmpty(env.HF_HUB_OFFLINE) ?? "").toLowerCase();
  return {
    endpoint: nonEmpty(env.MODEL_ENDPOINT) ?? nonEmpty(env.HF_ENDPOINT) ?? DEFAULT_ENDPOINT,
    token: nonEmpty(env.HF_TOKEN) ?? nonEmpty(env.HUGGING_FACE_HUB_TOKEN) ?? tokenFile(env),
    offline: ["1", "true", "yes", "on"].includes(offlineVar),
    cacheDir: hubCacheDir(env),
  };
}
