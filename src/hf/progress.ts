// bloomery hf: turning DownloadEvents into output: a one-line redrawn bar on a terminal, or one
// JSON object a line for programs (agent mode, logs, CI).
import type { DownloadEvent } from "./events.ts";

export interface TextSink {
  write(text: string): unknown;
}

/** Print each event as one JSON line. */
export function jsonProgress(out: TextSink = process.stderr): (e: DownloadEvent) => void {
  return (e) => {
    out.write(`${JSON.stringify(e)}\n`);
  };
}

/** Draw a progress bar for the file being downloaded (redrawn in place with \r); `width` = terminal columns. */
export function barProgress(out: TextSink = process.stderr, width = 100): (e: DownloadEvent) => void {
  let drawn = false;
  const clear = (): void => {
    if (drawn) out.write("\r\x1b[K");
    drawn = false;
  };
  return (e) => {
    switch (e.event) {
      case "download_plan": {
        const fetch = e.bytes_total - e.bytes_cached;
        if (fetch > 0) out.write(`${e.repo}: ${e.files.length} file${e.files.length === 1 ? "" : "s"}, ${formatBytes(fetch)} to download\n`);
        break;
      }
      case "download_start":
      case "download_progress": {
        const line = barLine(e.file, e.bytes_done, e.bytes_total, e.event === "download_progress" ? e.bytes_per_s : 0, width);
        out.write(`\r${line}\x1b[K`);
        drawn = true;
        break;
      }
      case "download_resume":
        clear();
        out.write(`resuming ${shortName(e.file, 60)} at ${formatBytes(e.bytes_done)} (checking the bytes already there)\n`);
        break;
      case "download_done":
        clear();
        out.write(e.cached ? `using cached ${e.path}\n` : `downloaded ${shortName(e.file, 60)} (${formatBytes(e.bytes_total)})\n`);
        break;
      case "download_warning":
        clear();
        out.write(`warning: ${e.message}\n`);
        break;
    }
  };
}

/** The reporter the command line uses by default: a bar when stderr is a terminal, JSON lines otherwise. */
export function defaultProgress(stream: TextSink & { isTTY?: boolean; columns?: number } = process.stderr): (e: DownloadEvent) => void {
  return stream.isTTY ? barProgress(stream, stream.columns ?? 100) : jsonProgress(stream);
}

export function barLine(file: string, done: number, total: number, bytesPerS: number, width: number): string {
  const pct = total > 0 ? Math.min(100, Math.floor((100 * done) / total)) : 100;
  const rate = bytesPerS > 0 ? `  ${formatBytes(bytesPerS)}/s` : "";
  const eta = bytesPerS > 0 && total > done ? `  ${formatDuration((total - done) / bytesPerS)}` : "";
  const tail = ` ${String(pct).padStart(3)}%  ${formatBytes(done)}/${formatBytes(total)}${rate}${eta}`;
  const name = shortName(file, Math.max(12, Math.min(40, width - tail.length - 24)));
  const barWidth = Math.max(10, width - name.length - tail.length - 4);
  const fill = total > 0 ? Math.floor((barWidth * done) / total) : barWidth;
  return `${name} [${"#".repeat(Math.min(barWidth, fill))}${".".repeat(Math.max(0, barWidth - fill))}]${tail}`;
}

function shortName(path: string, max: number): string {
  const base = path.slice(path.lastIndexOf("/") + 1);
  return base.length <= max ? base : `${base.slice(0, max - 1)}…`;
}

export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[u]}`;
}

function formatDuration(s: number): string {
  if (!Number.isFinite(s)) return "";
  const t = Math.ceil(s);
  if (t < 60) return `${t}s`;
  if (t < 3600) return `${Math.floor(t / 60)}m${String(t % 60).padStart(2, "0")}s`;
  return `${Math.floor(t / 3600)}h${String(Math.floor((t % 3600) / 60)).padStart(2, "0")}m`;
}
