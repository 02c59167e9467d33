// bloomery hf: the progress events a `-hf` resolution reports (one JSON object a line in agent
// mode; a bar on a terminal). Field names are snake_case, as the JSON lines print them.

interface Base {
  repo: string;
}

export type DownloadEvent =
  /** what the resolution will use: every file, its size, and how much is already cached */
  | (Base & { event: "download_plan"; commit: string; files: { path: string; size: number; cached: boolean }[]; bytes_total: number; bytes_cached: number })
  /** a partial download was found; its bytes are being checked before the rest is fetched */
  | (Base & { event: "download_resume"; file: string; bytes_done: number; bytes_total: number })
  | (Base & { event: "download_start"; file: string; bytes_done: number; bytes_total: number; resumed: boolean })
  | (Base & { event: "download_progress"; file: string; bytes_done: number; bytes_total: number; bytes_per_s: number })
  /** the file is in place: `cached` when no byte of it was fetched now */
  | (Base & { event: "download_done"; file: string; path: string; bytes_total: number; cached: boolean })
  /** something worth telling that is not a failure (a retry, the cache used because the hub was unreachable) */
  | (Base & { event: "download_warning"; file?: string; message: string });

export type DownloadEventName = DownloadEvent["event"];
