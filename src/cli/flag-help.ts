// Help text for a FlagTable, laid out as llama prints its usage: sections, spellings, wrapped help, env twin, default.

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

/** The whole usage text: a usage line, then one section per group in table order. */
export function tableHelp(table: FlagTable, usage?: string): string {
  const parts: string[] = [`usage: ${usage ?? `${table.program} [options]`}\n`];
  for (const group of table.groups) {
    const defs = table.flags.filter((d) => d.group === group.id);
    if (defs.length === 0) continue;
    parts.push(`\n----- ${group.title} -----\n\n${defs.map(flagHelp).join("")}`);
  }
  return parts.join("");
}
