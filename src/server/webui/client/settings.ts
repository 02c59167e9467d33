// bloomery web UI (browser): the settings, kept in this browser's localStorage - the API key, the
// system message, the theme, and sampling fields sent with each request (empty: the server's
// default, shown as the placeholder from /props), plus a JSON object merged into the request
// (tools, tool_choice, any llama-server field).

export type Theme = "system" | "light" | "dark";

export interface Settings {
  apiKey: string;
  system: string;
  theme: Theme;
  /** reasoning shown open (else folded) */
  showReasoning: boolean;
  /** sampling fields by llama-server's request name; "" = the server's default */
  params: Record<string, string>;
  /** JSON object merged into every chat request */
  custom: string;
}

/** A sampling field of the request: its name, a label, and what it takes. */
export interface SamplingField {
  key: string;
  label: string;
  help: string;
  integer?: boolean;
}

export const SAMPLING_FIELDS: readonly SamplingField[] = [
  { key: "temperature", label: "Temperature", help: "randomness; 0 picks the likeliest token" },
  { key: "top_k", label: "Top K", help: "keep the K likeliest tokens (0 = all)", integer: true },
  { key: "top_p", label: "Top P", help: "keep the likeliest tokens whose probabilities add up to P" },
  { key: "min_p", label: "Min P", help: "drop tokens below P times the likeliest one's probability" },
  { key: "typical_p", label: "Typical P", help: "locally typical sampling (1 = off)" },
  { key: "max_tokens", label: "Max tokens", help: "most tokens an answer takes (-1 = until the end)", integer: true },
  { key: "repeat_penalty", label: "Repeat penalty", help: "penalty for tokens of the last repeat_last_n (1 = off)" },
  { key: "repeat_last_n", label: "Repeat last N", help: "tokens the penalties look back over", integer: true },
  { key: "presence_penalty", label: "Presence penalty", help: "penalty for any token already present" },
  { key: "frequency_penalty", label: "Frequency penalty", help: "penalty growing with a token's count" },
  { key: "dry_multiplier", label: "DRY multiplier", help: "penalty for repeating sequences (0 = off)" },
  { key: "xtc_probability", label: "XTC probability", help: "chance of excluding the top choices (0 = off)" },
  { key: "seed", label: "Seed", help: "-1 = random", integer: true },
];

const KEY = "bloomery-webui.settings";

export const DEFAULTS: Settings = { apiKey: "", system: "", theme: "system", showReasoning: false, params: {}, custom: "" };

let current: Settings | undefined;

export function settings(): Settings {
  if (current) return current;
  let stored: Partial<Settings> = {};
  try {
    stored = JSON.parse(localStorage.getItem(KEY) ?? "{}") as Partial<Settings>;
  } catch {
    stored = {};
  }
  current = { ...DEFAULTS, ...stored, params: { ...(stored.params ?? {}) } };
  return current;
}

export function saveSettings(s: Settings): void {
  current = s;
  localStorage.setItem(KEY, JSON.stringify(s));
  applyTheme(s.theme);
}

export function applyTheme(t: Theme): void {
  if (t === "system") delete document.documentElement.dataset.theme;
  else document.documentElement.dataset.theme = t;
}

/** Problems with the settings, by field ("" = fine). */
export function checkField(f: SamplingField, v: string): string {
  if (v.trim() === "") return "";
  const n = Number(v);
  if (!Number.isFinite(n)) return `${f.label}: a number, or empty for the server's default`;
  if (f.integer && !Number.isInteger(n)) return `${f.label}: a whole number`;
  return "";
}

export function checkCustom(text: string): string {
  if (text.trim() === "") return "";
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === "object" && v !== null && !Array.isArray(v) ? "" : "Custom JSON: an object, like {\"tools\": [...]}";
  } catch (e) {
    return `Custom JSON: ${e instanceof Error ? e.message : String(e)}`;
  }
}

/** The request fields the settings give (numbers only where set), the custom object last. */
export function requestFields(s: Settings): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of SAMPLING_FIELDS) {
    const v = s.params[f.key];
    if (v !== undefined && v.trim() !== "" && checkField(f, v) === "") out[f.key] = Number(v);
  }
  if (s.custom.trim() !== "" && checkCustom(s.custom) === "") Object.assign(out, JSON.parse(s.custom) as Record<string, unknown>);
  return out;
}
