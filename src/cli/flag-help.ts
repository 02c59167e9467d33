// Help text for a FlagTable, laid out as llama prints its usage: sections, spellings, wrapped help, env twin,
// default; the flags recognised and refused (llama's flags bloomery does not support yet) listed once at the
// end, by reason, instead of a note under each.

import { spellings, type FlagDef, type FlagTable, type FlagValue } from "./flag-types.ts";

const HELP_COLUMN = 40;
const HELP_WIDTH = 70;

function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  for (const paragraph of text.split("\n")) {
    if (paragraph.length <= width) {
      lines.push(paragraph);
      continue;
    }
    let line = "";
    for (const word of paragraph.split(/\s+/).filter((w) => w.length > 0)) {
      if (line.length > 0 && line.length + 1 + word.length > width) {
        lines.push(line);
        line = word;
      } else {
        line = line.length > 0 ? `${line} ${word}` : word;
      }
    }
    if (line.length > 0) lines.push(line);
  }
  return lines;
}

function showValue(value: FlagValue, sep: string): string {
  if (typeof value === "boolean") return value ? "enabled" : "disabled";
  if (typeof value === "number") return String(value);
  if (typeof value === "string") return value === "" ? '""' : value;
  if (Array.isArray(value)) return value.length === 0 ? "none" : value.map((v) => showValue(v, sep)).join(sep);
  return JSON.stringify(value);
}

/** The default as help shows it, or undefined when the flag has none worth showing. */
export function describeDefault(def: FlagDef): string | undefined {
  if (def.defaultText !== undefined) return def.defaultText;
  if (def.default === undefined) return undefined;
  const kind = def.value;
  const sep = kind.type === "list" && (kind.split === ";" || kind.split === ";,") ? ";" : ",";
  return showValue(def.default, sep);
}

/** The left column: spellings then the value hint, as llama pads them. */
export function flagSignature(def: FlagDef): string {
  const all = spellings(def);
  let sig: string;
  if (all.length === 1) {
    sig = all[0];
  } else {
    const first = `${all[0]}, `;
    sig = first.padEnd(7) + all.slice(1).join(", ");
  }
  return def.hint ? `${sig} ${def.hint}` : sig;
}

/** One flag's help entry, ending in a newline. */
export function flagHelp(def: FlagDef): string {
  const notes: string[] = [];
  const dflt = describeDefault(def);
  if (dflt !== undefined) notes.push(`(default: ${dflt})`);
  if (def.env !== undefined) notes.push(`(env: ${def.env})`);
  const text = [def.help, ...(notes.length > 0 ? [notes.join(" ")] : [])];
  if (def.support !== "supported") text.push(`[not supported: ${def.support.refused}]`);
  const lines = wrap(text.join("\n"), HELP_WIDTH);
  const sig = flagSignature(def);
  const pad = " ".repeat(HELP_COLUMN);
  let out = sig.length > HELP_COLUMN - 3 ? `${sig}\n${pad}` : sig.padEnd(HELP_COLUMN);
  out += lines.join(`\n${pad}`);
  return `${out}\n`;
}

/** A refused flag in the closing list: its spellings, and the value it accepts as a no-op when it has one. */
function refusedEntry(def: FlagDef): string {
  const names = spellings(def).join("/");
  const s = def.support;
  if (s === "supported" || s.accepts === undefined) return names;
  const v = s.accepts;
  const accepted = typeof v === "boolean" && def.negNames?.length ? (v ? def.names[0] : def.negNames[0]) : `${def.names[0]} ${showValue(v, ",")}`;
  return `${names} (${accepted} is accepted: bloomery does that anyway)`;
}

/** Items joined by ", " into lines of at most `width`, an item broken only when it alone is longer. */
function pack(items: string[], width: number): string[] {
  const lines: string[] = [];
  let line = "";
  items.forEach((item, i) => {
    const piece = i < items.length - 1 ? `${item},` : item;
    if (line && line.length + 1 + piece.length > width) {
      lines.push(line);
      line = "";
    }
    if (!line && piece.length > width) {
      const w = wrap(piece, width);
      lines.push(...w.slice(0, -1));
      line = w[w.length - 1];
    } else line = line ? `${line} ${piece}` : piece;
  });
  if (line) lines.push(line);
  return lines;
}

/** The refused flags, once each, under their reasons (reasons in the order their first flag appears). */
export function refusedHelp(defs: readonly FlagDef[]): string {
  const byReason = new Map<string, FlagDef[]>();
  for (const d of defs) {
    if (d.support === "supported") continue;
    const list = byReason.get(d.support.refused) ?? [];
    list.push(d);
    byReason.set(d.support.refused, list);
  }
  const parts: string[] = [];
  for (const [reason, list] of byReason) {
    const head = wrap(`${reason}:`, HELP_WIDTH + HELP_COLUMN - 2);
    const body = pack(list.map(refusedEntry), HELP_WIDTH + HELP_COLUMN - 6).map((l) => `    ${l}`);
    parts.push([...head, ...body].join("\n"));
  }
  return parts.join("\n");
}

export interface HelpOptions {
  /** lines after the usage line (the subcommands) */
  preamble?: string;
}

/**
 * The whole usage text: a usage line, then one section per group in table order with the flags
 * bloomery supports, then every flag it recognises and refuses, once, by reason.
 */
export function tableHelp(table: FlagTable, usage?: string, opts: HelpOptions = {}): string {
  const parts: string[] = [`usage: ${usage ?? `${table.program} [options]`}\n`];
  if (opts.preamble) parts.push(opts.preamble.endsWith("\n") ? opts.preamble : `${opts.preamble}\n`);
  for (const group of table.groups) {
    const all = table.flags.filter((d) => d.group === group.id);
    const defs = all.filter((d) => d.support === "supported");
    if (all.length === 0) continue;
    const body = defs.length ? defs.map(flagHelp).join("") : `(none supported yet: its ${all.length} flags are listed at the end)\n`;
    parts.push(`\n----- ${group.title} -----\n\n${body}`);
  }
  const refused = table.flags.filter((d) => d.support !== "supported");
  if (refused.length) {
    parts.push(`\n----- not supported yet (${refused.length} flags of llama's, recognised and refused by name with the reason) -----\n\n${refusedHelp(refused)}\n`);
  }
  return parts.join("");
}
