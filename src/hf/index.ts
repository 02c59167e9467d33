// bloomery hf: the public face of the Hugging Face download module (what the CLI and server call).
export { resolveHfModel, planHfModel, type HfResolveOptions, type HfResolved, type HfPlan, type HfPlanFile } from "./resolve.ts";
export { parseHfRepo, checkSpec, selectFiles, splitInfo, pathHasTag, isModelGguf, fileTag, isValidRepoId, DEFAULT_TAGS, type HfModelSpec, type RepoFile } from "./spec.ts";
export { hubCacheDir, repoFolderName, listCachedRepos, RepoCache } from "./cache.ts";
export { hfOptionsFromEnv, type HfEnvOptions } from "./env.ts";
export { HubClient, DEFAULT_ENDPOINT } from "./api.ts";
export { HfError, isHfError, HF_ERROR_CODES, type HfErrorCode } from "./errors.ts";
export { jsonProgress, barProgress, defaultProgress, formatBytes, type TextSink } from "./progress.ts";
export type { DownloadEvent, DownloadEventName } from "./events.ts";
