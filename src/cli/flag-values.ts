// Flag values: turning one raw string (from argv or an environment variable) into a typed value, per value kind.

import {
  FlagError,
  isFalsey,
  isTruthy,
  type ElemKind,
  type FlagDef,
  type FlagValue,
  type JsonObject,
  type ListSplit,
} from "./flag-types.ts";

/** Where a raw value came from, for error messages: the spelling used, and the variable when it came from the environment. */
export interface ValueSource {
  readonly flag: string;
  readonly env?: string;
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;
/** llama-bench ranges are expanded; more values than this is certainly a typo. */
const MAX_RANGE_VALUES = 100_000;

const INT_RE = /^[+-]?\d+$/;
const FLOAT_RE = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;
const RANGE_RE = /^(-?\d+)(?:-(\d+)(?:([+*])(\d+))?)?$/;

function where(src: ValueSource): string {
  return src.env ? `${src.env} (environment twin of ${src.flag})` : src.flag;
}

/** Throws the FlagError for a value that does not parse. */
export function badValue(src: ValueSource, raw: string, expected: string): never {
  throw new FlagError(src.flag, `invalid value for ${where(src)}: ${JSON.stringify(raw)} (expected ${expected})`, {
    value: raw,
    env: src.env,
  });
}

/** Throws the FlagError for a value that is recognised but refused. */
export function refusedValue(src: ValueSource, raw: string, reason: string): never {
  throw new FlagError(src.flag, `${where(src)} ${raw} is recognised but not available: ${reason}`, {
    value: raw,
    env: src.env,
    reason,
  });
}

/** Reads a toggle word (on/off, true/false, enabled/disabled, 1/0). */
export function parseToggle(raw: string, src: ValueSource): boolean {
  if (isTruthy(raw)) return true;
  if (isFalsey(raw)) return false;
  return badValue(src, raw, "on|off, true|false, enabled|disabled or 1|0");
}

function parseInt32(raw: string, src: ValueSource, kind: Extract<ElemKind, { type: "int" }>): number | string {
  const keywords = kind.keywords;
  if (keywords) {
    const hit = keywords[raw.toLowerCase()];
    if (hit !== undefined) return hit;
  }
  const expected = keywords ? `an integer or one of: ${Object.keys(keywords).join(", ")}` : "an integer";
  if (!INT_RE.test(raw)) badValue(src, raw, expected);
  const n = Number(raw);
  const min = kind.min ?? INT32_MIN;
  const max = kind.max ?? INT32_MAX;
  if (!Number.isSafeInteger(n) || n < min || n > max) badValue(src, raw, `${expected} in ${min}..${max}`);
  return n;
}

function parseFloatValue(raw: string, src: ValueSource, kind: Extract<ElemKind, { type: "float" }>): number {
  const n = FLOAT_RE.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isFinite(n)) badValue(src, raw, "a number");
  if ((kind.min !== undefined && n < kind.min) || (kind.max !== undefined && n > kind.max)) {
    badValue(src, raw, `a number in ${kind.min ?? "-inf"}..${kind.max ?? "inf"}`);
  }
  return n;
}

function parseEnum(raw: string, src: ValueSource, kind: Extract<ElemKind, { type: "enum" }>): string {
  const key = kind.caseInsensitive ? raw.toLowerCase() : raw;
  let value: string | undefined;
  for (const v of kind.values) {
    if ((kind.caseInsensitive ? v.toLowerCase() : v) === key) value = v;
  }
  if (value === undefined && kind.aliases) {
    for (const [alias, target] of Object.entries(kind.aliases)) {
      if ((kind.caseInsensitive ? alias.toLowerCase() : alias) === key) value = target;
    }
  }
  if (value === undefined) return badValue(src, raw, `one of: ${kind.values.join(", ")}`);
  if (kind.supported && !kind.supported.includes(value)) {
    refusedValue(src, raw, kind.refusedReason ?? `supported values are ${kind.supported.join(", ")}`);
  }
  return value;
}

function parseRange(raw: string, src: ValueSource, allowNegative: boolean): number[] {
  const m = RANGE_RE.exec(raw);
  const expected = "first[-last[(+|*)step]] with integers";
  if (!m || (!allowNegative && raw.startsWith("-"))) return badValue(src, raw, expected);
  const first = Number(m[1]);
  const last = m[2] !== undefined ? Number(m[2]) : first;
  const op = m[3] ?? "+";
  const step = m[4] !== undefined ? Number(m[4]) : 1;
  const out: number[] = [];
  for (let i = first; i <= last; ) {
    out.push(i);
    const next = op === "+" ? i + step : i * step;
    if (next <= i) badValue(src, raw, `${expected} that increases (step ${op}${step} from ${i} does not)`);
    if (out.length > MAX_RANGE_VALUES) badValue(src, raw, `a range of at most ${MAX_RANGE_VALUES} values`);
    i = next;
  }
  return out;
}

function parseOverride(raw: string, src: ValueSource): FlagValue {
  const at = raw.indexOf("=");
  const expected = "<tensor name regex>=<buffer type>, e.g. exps=CPU";
  if (at <= 0 || at === raw.length - 1) return badValue(src, raw, expected);
  const pattern = raw.slice(0, at);
  const buffer = raw.slice(at + 1);
  try {
    new RegExp(pattern);
  } catch (e) {
    badValue(src, raw, `a valid regular expression before '=' (${e instanceof Error ? e.message : String(e)})`);
  }
  return { pattern, buffer };
}

function parseJsonObject(raw: string, src: ValueSource): JsonObject {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return badValue(src, raw, "a JSON object");
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return badValue(src, raw, "a JSON object");
  return parsed as JsonObject;
}

/** Parses one element; a `range` gives several numbers. */
export function parseElem(kind: ElemKind, raw: string, src: ValueSource): FlagValue | number[] {
  switch (kind.type) {
    case "int":
      return parseInt32(raw, src, kind);
    case "float":
      return parseFloatValue(raw, src, kind);
    case "string":
      if (kind.nonEmpty && raw.length === 0) badValue(src, raw, "a non-empty string");
      return raw;
    case "enum":
      return parseEnum(raw, src, kind);
    case "toggle":
      return parseToggle(raw, src);
    case "range":
      return parseRange(raw, src, kind.allowNegative ?? false);
    case "override":
      return parseOverride(raw, src);
    case "json":
      return parseJsonObject(raw, src);
  }
}

/** CSV row as llama reads `--api-key` / `--host`: commas split, double quotes protect commas, `""` is a quote. */
export function splitCsv(input: string): string[] {
  const fields: string[] = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < input.length; i++) {
    const ch = input[i];
    if (ch === '"') {
      if (!quoted) {
        if (field.length > 0) field += '"';
        else quoted = true;
      } else if (input[i + 1] === '"') {
        field += '"';
        i++;
      } else {
        quoted = false;
      }
    } else if (ch === "," && !quoted) {
      fields.push(field);
      field = "";
    } else {
      field += ch;
    }
  }
  fields.push(field);
  return fields;
}

/** Splits a list value into its raw elements. */
export function splitList(raw: string, split: ListSplit | undefined): string[] {
  switch (split) {
    case undefined:
      return [raw];
    case ",":
      return raw.split(",");
    case ";":
      return raw.split(";");
    case ";,":
      return raw.split(/[;,]/);
    case "comma-slash":
      return raw.split(/[,/]+/);
    case "csv":
      return splitCsv(raw);
  }
}

/**
 * Parses the raw value of a flag that takes one. For `none` / `bool` flags the raw value is a toggle word
 * (from `--flag=value` or the environment) and the result is the stored value for on / off.
 */
export function parseValue(def: FlagDef, raw: string, src: ValueSource): FlagValue {
  const kind = def.value;
  let value: FlagValue;
  if (kind.type === "none" || kind.type === "bool") {
    const on = parseToggle(raw, src);
    value = on ? (def.stores?.on ?? true) : (def.stores?.off ?? false);
  } else if (kind.type === "list") {
    if (kind.none !== undefined && raw === kind.none) {
      value = [];
    } else {
      const out: FlagValue[] = [];
      for (let part of splitList(raw, kind.split)) {
        if (kind.trim) part = part.trim();
        if (kind.dropEmpty && part.length === 0) continue;
        const v = parseElem(kind.of, part, src);
        if (Array.isArray(v) && kind.of.type === "range") out.push(...v);
        else out.push(v);
      }
      value = out;
    }
  } else {
    const v = parseElem(kind, raw, src);
    value = v;
  }
  const problem = def.check?.(value);
  if (problem !== undefined) badValue(src, raw, problem);
  return value;
}
