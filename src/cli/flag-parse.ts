// Table-driven command-line parsing: argv and environment twins against a FlagTable (llama's spellings and rules).

import {
  FlagError,
  FlagTableError,
  negatedEnv,
  spellings,
  type FlagDef,
  type FlagTable,
  type FlagValue,
} from "./flag-types.ts";
import { parseToggle, parseValue, type ValueSource } from "./flag-values.ts";

/** The process environment, or any stand-in for it. */
export type Env = Readonly<Record<string, string | undefined>>;

/** Where a key's value came from when it did not come from the default. */
export type ValueOrigin = "argv" | "env";

export interface TableParseResult {
  /** Set when an action flag (help, version) was met; parsing stopped there. */
  readonly action: string | undefined;
  /** Every key of the table: the given value, else the default, else undefined. */
  readonly values: Readonly<Record<string, FlagValue | undefined>>;
  /** Keys that were given, and how. */
  readonly origins: Readonly<Record<string, ValueOrigin>>;
  /** Harmless oddities worth printing (a repeated flag, a variable overridden by a flag). */
  readonly warnings: readonly string[];
  /** Arguments that are not flags (only when allowed). */
  readonly positionals: readonly string[];
}

export interface ParseOptions {
  /** Accept arguments that are not flags (collected in `positionals`); otherwise they are an error. */
  readonly allowPositionals?: boolean;
}

interface Hit {
  readonly def: FlagDef;
  readonly negated: boolean;
}

const indexes = new WeakMap<FlagTable, Map<string, Hit>>();

function indexOf(table: FlagTable): Map<string, Hit> {
  let index = indexes.get(table);
  if (!index) {
    index = new Map();
    for (const def of table.flags) {
      for (const name of def.names) index.set(name, { def, negated: false });
      for (const name of def.negNames ?? []) index.set(name, { def, negated: true });
    }
    indexes.set(table, index);
  }
  return index;
}

/** llama accepts `_` for `-` in double-dash spellings (`--ctx_size`). */
function normalize(name: string): string {
  return name.startsWith("--") ? name.replaceAll("_", "-") : name;
}

/** Looks a spelling up (after llama's `_` to `-` normalisation). */
export function findFlag(table: FlagTable, spelling: string): Hit | undefined {
  return indexOf(table).get(normalize(spelling));
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length];
}

/** The known spelling closest to an unknown one, when one is close enough to be a likely typo. */
export function suggestFlag(table: FlagTable, unknown: string): string | undefined {
  const wanted = normalize(unknown);
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const name of indexOf(table).keys()) {
    const d = editDistance(wanted, name);
    if (d < bestDistance || (d === bestDistance && best !== undefined && name.length > best.length)) {
      best = name;
      bestDistance = d;
    }
  }
  const limit = Math.max(2, Math.floor(wanted.length / 3));
  return bestDistance <= limit ? best : undefined;
}

function sameValue(a: FlagValue, b: FlagValue): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

function refusal(def: FlagDef, spelling: string, env: string | undefined, reason: string): FlagError {
  const where = env ? `${env} (environment twin of ${spelling})` : spelling;
  return new FlagError(spelling, `${where} is recognised but not available: ${reason}`, { env, reason });
}

/** A token that follows an optional-value flag is its value unless it looks like a flag. */
function looksLikeFlag(token: string): boolean {
  return token.startsWith("-") && token.length > 1 && !/^-\d/.test(token);
}

class Collector {
  readonly given = new Map<string, { value: FlagValue; origin: ValueOrigin }>();
  readonly warnings: string[] = [];
  private readonly seen = new Map<FlagDef, string>();

  assign(def: FlagDef, value: FlagValue, origin: ValueOrigin, spelling: string): void {
    const prev = this.given.get(def.key);
    const again = origin === "argv" && this.seen.has(def);
    if (origin === "argv") this.seen.set(def, spelling);
    if (prev && prev.origin === origin && def.repeat === "append" && again) {
      this.given.set(def.key, { value: combine(prev.value, value), origin });
      return;
    }
    if (again && def.repeat !== "append") {
      this.warnings.push(`${spelling} given more than once; the last value is used`);
    }
    this.given.set(def.key, { value, origin });
  }
}

function combine(a: FlagValue, b: FlagValue): FlagValue {
  if (Array.isArray(a) && Array.isArray(b)) return [...a, ...b];
  if (isPlainObject(a) && isPlainObject(b)) return { ...a, ...b };
  return b;
}

function isPlainObject(v: FlagValue): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function checkSupport(def: FlagDef, spelling: string, env: string | undefined, value: FlagValue | undefined): void {
  const support = def.support;
  if (support === "supported") return;
  if (value !== undefined && support.accepts !== undefined && sameValue(value, support.accepts)) return;
  throw refusal(def, spelling, env, support.refused);
}

/** Parses `argv` (the arguments after the program name) and the environment twins against `table`. */
export function parseWithTable(table: FlagTable, argv: readonly string[], env: Env, opts: ParseOptions = {}): TableParseResult {
  const out = new Collector();
  const positionals: string[] = [];

  for (let i = 0; i < argv.length; i++) {
    const token = argv[i];
    if (token === "--") {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    if (!token.startsWith("-") || token === "-") {
      positionals.push(token);
      continue;
    }
    let name = token;
    let inline: string | undefined;
    let hit = findFlag(table, token);
    if (!hit) {
      const eq = token.indexOf("=");
      if (eq > 0) {
        name = token.slice(0, eq);
        inline = token.slice(eq + 1);
        hit = findFlag(table, name);
      }
    }
    if (!hit) {
      const guess = suggestFlag(table, name);
      throw new FlagError(name, `unknown flag: ${name}${guess ? ` (did you mean ${guess}?)` : ""}`);
    }
    const { def, negated } = hit;
    const src: ValueSource = { flag: name };
    const kind = def.value.type;
    const needsValueForSupport = def.support !== "supported" && def.support.accepts !== undefined;
    if (!needsValueForSupport) checkSupport(def, name, undefined, undefined);
    if (def.action !== undefined) return { action: def.action, values: {}, origins: {}, warnings: out.warnings, positionals };

    let value: FlagValue;
    if (kind === "none" || kind === "bool") {
      if (inline !== undefined) {
        if (negated) throw new FlagError(name, `${name} takes no value (got ${JSON.stringify(inline)})`, { value: inline });
        value = parseValue(def, inline, src);
      } else {
        value = negated ? (def.stores?.off ?? false) : (def.stores?.on ?? true);
      }
    } else {
      let raw = inline;
      if (raw === undefined) {
        const next = argv[i + 1];
        if (next !== undefined && (def.implied === undefined || !looksLikeFlag(next))) {
          raw = next;
          i++;
        } else if (def.implied !== undefined) {
          raw = def.implied;
        } else {
          throw new FlagError(name, `missing value for ${name}${def.hint ? ` (expected ${def.hint})` : ""}`);
        }
      }
      value = parseValue(def, raw, src);
    }
    if (needsValueForSupport) checkSupport(def, name, undefined, value);
    out.assign(def, value, "argv", name);
  }

  if (positionals.length > 0 && !opts.allowPositionals) {
    const first = positionals[0];
    const hint = /\.gguf$/i.test(first) ? `; to load it, use -m ${first}` : "; options are flags starting with -";
    throw new FlagError(first, `unexpected argument: ${JSON.stringify(first)}${hint}`, { value: first });
  }

  applyEnv(table, env, out);

  const values: Record<string, FlagValue | undefined> = {};
  for (const def of table.flags) {
    if (def.action !== undefined) continue;
    if (!(def.key in values) || (values[def.key] === undefined && def.default !== undefined)) values[def.key] = def.default;
  }
  const origins: Record<string, ValueOrigin> = {};
  for (const [key, { value, origin }] of out.given) {
    values[key] = value;
    origins[key] = origin;
  }
  return { action: undefined, values, origins, warnings: out.warnings, positionals };
}

function applyEnv(table: FlagTable, env: Env, out: Collector): void {
  for (const def of table.flags) {
    if (def.env === undefined) continue;
    const spelling = def.names[0];
    const neg = def.negNames ? negatedEnv(def.env) : undefined;
    const raw = env[def.env];
    const negRaw = neg !== undefined ? env[neg] : undefined;
    const present = (raw !== undefined && raw !== "") || negRaw !== undefined;
    if (!present) continue;
    const prev = out.given.get(def.key);
    if (prev && prev.origin === "argv") {
      out.warnings.push(`${negRaw !== undefined ? neg : def.env} is set but the command line sets ${spelling}; the flag wins`);
      continue;
    }
    let value: FlagValue;
    let from: string;
    if (negRaw !== undefined && neg !== undefined) {
      // llama: the LLAMA_ARG_NO_* form of a negatable flag means "off", whatever its value.
      value = def.stores?.off ?? false;
      from = neg;
    } else {
      from = def.env;
      const text = raw as string;
      if (def.value.type === "none" && !parseToggle(text, { flag: spelling, env: from })) continue; // llama: a falsey value leaves a presence flag unset
      const accepts = def.support !== "supported" && def.support.accepts !== undefined;
      if (!accepts) checkSupport(def, spelling, from, undefined);
      value = parseValue(def, text, { flag: spelling, env: from });
    }
    checkSupport(def, spelling, from, value);
    out.assign(def, value, "env", from);
  }
}

/** Checks a table for mistakes: spellings, environment names, groups, defaults. Throws FlagTableError. */
export function checkTable(table: FlagTable): void {
  const seen = new Map<string, FlagDef>();
  const envs = new Set<string>();
  const groups = new Set(table.groups.map((g) => g.id));
  const defaults = new Map<string, FlagDef>();
  for (const def of table.flags) {
    const label = def.names[0] ?? "(no name)";
    if (def.names.length === 0) throw new FlagTableError("a flag has no spelling");
    for (const name of spellings(def)) {
      if (!/^--?[A-Za-z0-9][A-Za-z0-9.+-]*$/.test(name)) throw new FlagTableError(`bad spelling ${JSON.stringify(name)}`);
      if (seen.has(name)) throw new FlagTableError(`spelling ${name} is used twice`);
      seen.set(name, def);
    }
    if (def.env !== undefined) {
      if (envs.has(def.env)) throw new FlagTableError(`environment variable ${def.env} is used twice`);
      envs.add(def.env);
    }
    if (!groups.has(def.group)) throw new FlagTableError(`${label}: unknown group ${def.group}`);
    if (def.negNames && def.value.type !== "bool") throw new FlagTableError(`${label}: only bool flags have negations`);
    if (def.value.type === "bool" && !def.negNames) throw new FlagTableError(`${label}: a bool flag needs negated spellings`);
    if (def.implied !== undefined && (def.value.type === "none" || def.value.type === "bool")) {
      throw new FlagTableError(`${label}: a flag without a value cannot have an implied value`);
    }
    if (def.implied !== undefined) parseValue(def, def.implied, { flag: label });
    if (def.action !== undefined && def.value.type !== "none") throw new FlagTableError(`${label}: an action flag takes no value`);
    if (def.help.trim().length === 0) throw new FlagTableError(`${label}: no help text`);
    if (def.support !== "supported" && def.support.refused.trim().length === 0) throw new FlagTableError(`${label}: refusal without a reason`);
    if (def.default !== undefined) {
      const other = defaults.get(def.key);
      if (other) throw new FlagTableError(`${label}: key ${def.key} already has a default from ${other.names[0]}`);
      defaults.set(def.key, def);
    }
  }
}
