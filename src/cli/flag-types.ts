// Flag tables: the declarative shape of a command-line flag (spellings, value kind, env twin, default, support) and FlagError.

/** A JSON object given on the command line (e.g. --chat-template-kwargs). */
export interface JsonObject {
  readonly [key: string]: unknown;
}

/** One `-ot` entry: tensors whose name matches `pattern` (a regular expression) go to `buffer` (CPU, CUDA0, ...). */
export interface TensorOverride {
  readonly pattern: string;
  readonly buffer: string;
}

/** A parsed flag value. Lists hold parsed elements; `range` elements are flattened into their numbers. */
export type FlagValue = boolean | number | string | JsonObject | TensorOverride | readonly FlagValue[];

/** Kinds a single value (or one element of a list) can have. */
export type ElemKind =
  /** Integer; `keywords` maps words (`auto`, `all`) to the stored value. Default bounds are int32. */
  | { readonly type: "int"; readonly min?: number; readonly max?: number; readonly keywords?: Readonly<Record<string, number | string>> }
  /** Finite decimal number. */
  | { readonly type: "float"; readonly min?: number; readonly max?: number }
  | { readonly type: "string"; readonly nonEmpty?: boolean }
  /**
   * One of `values`; `aliases` maps other spellings to a value. When `supported` is given, the other
   * values are recognised but refused with `refusedReason`.
   */
  | {
      readonly type: "enum";
      readonly values: readonly string[];
      readonly aliases?: Readonly<Record<string, string>>;
      readonly caseInsensitive?: boolean;
      readonly supported?: readonly string[];
      readonly refusedReason?: string;
    }
  /** A value read as a boolean the way llama reads one: on/enabled/true/1 vs off/disabled/false/0. */
  | { readonly type: "toggle" }
  /** llama-bench integer range: `first[-last[(+|*)step]]`, expanded into its numbers. */
  | { readonly type: "range"; readonly allowNegative?: boolean }
  /** `<tensor name regex>=<buffer type>`. */
  | { readonly type: "override" }
  /** A JSON object. */
  | { readonly type: "json" };

/** How a list value is split into elements. `csv` honours double quotes; `comma-slash` splits on runs of `,` and `/`. */
export type ListSplit = "," | ";" | ";," | "csv" | "comma-slash";

export type ValueKind =
  /** Presence flag: takes no value (llama's void handler). */
  | { readonly type: "none" }
  /** Boolean with negated spellings (`--mmap` / `--no-mmap`). */
  | { readonly type: "bool" }
  | ElemKind
  /**
   * A list. `split` absent: each occurrence adds one element. `none`: a value that empties the list.
   * `trim`: strip spaces around elements; `dropEmpty`: skip empty elements (after trimming).
   */
  | {
      readonly type: "list";
      readonly of: ElemKind;
      readonly split?: ListSplit;
      readonly none?: string;
      readonly trim?: boolean;
      readonly dropEmpty?: boolean;
    };

/** A flag is either implemented, or recognised and refused with a one-line reason. */
export type SupportState =
  | "supported"
  | {
      readonly refused: string;
      /** A value that matches what bloomery does anyway (e.g. `--no-webui`): accepted as a no-op. */
      readonly accepts?: FlagValue;
    };

export interface FlagDef {
  /** Positive spellings, as llama spells them (first is the one it lists first). */
  readonly names: readonly string[];
  /** Negated spellings of a `bool` flag (`--no-mmap`, `-nocb`). */
  readonly negNames?: readonly string[];
  readonly value: ValueKind;
  /** Placeholder shown in help after the spellings (`N`, `FNAME`, `[on|off|auto]`). */
  readonly hint?: string;
  /** Environment twin (`LLAMA_ARG_*`); a negatable flag also answers to its `LLAMA_ARG_NO_*` form. */
  readonly env?: string;
  /** Key in the parsed values. Several flags may share one key (the last one given wins). */
  readonly key: string;
  /** Value when not given; absent means unset. Only one flag per key carries the default. */
  readonly default?: FlagValue;
  /** How help shows the default when the value alone says too little (`same as --threads`). */
  readonly defaultText?: string;
  /** One or more lines, our own words. */
  readonly help: string;
  /** Help section (a group id of the table). */
  readonly group: string;
  readonly support: SupportState;
  /** Several occurrences: `last` (default) keeps the last, `append` concatenates lists / merges JSON objects. */
  readonly repeat?: "last" | "append";
  /** The value is optional: a bare occurrence means this value (`-fa` alone means `on`). */
  readonly implied?: string;
  /** Values stored by a `none` / `bool` flag; default `{ on: true, off: false }`. */
  readonly stores?: { readonly on: FlagValue; readonly off: FlagValue };
  /** Extra check on a parsed value: returns what is wrong, or undefined. */
  readonly check?: (value: FlagValue) => string | undefined;
  /** Parsing stops at this flag and reports the action (help, version). */
  readonly action?: string;
}

export interface FlagGroup {
  readonly id: string;
  /** Section header in help. */
  readonly title: string;
}

export interface FlagTable {
  /** Program name used in help and messages. */
  readonly program: string;
  readonly groups: readonly FlagGroup[];
  readonly flags: readonly FlagDef[];
}

/** A bad command line or environment: `.flag` is the spelling (or variable) at fault. */
export class FlagError extends Error {
  override readonly name = "FlagError";
  readonly flag: string;
  readonly value: string | undefined;
  /** The environment variable the value came from, when it came from one. */
  readonly env: string | undefined;
  /** The refusal reason when the flag or value is recognised but not supported. */
  readonly reason: string | undefined;

  constructor(flag: string, message: string, opts: { value?: string; env?: string; reason?: string } = {}) {
    super(message);
    this.flag = flag;
    this.value = opts.value;
    this.env = opts.env;
    this.reason = opts.reason;
  }
}

/** A malformed table (a programming error, caught by the table check and its test). */
export class FlagTableError extends Error {
  override readonly name = "FlagTableError";
}

const TRUTHY = new Set(["on", "enabled", "true", "1"]);
const FALSEY = new Set(["off", "disabled", "false", "0"]);

/** llama's truthy words (on, enabled, true, 1); case-insensitive here. */
export function isTruthy(value: string): boolean {
  return TRUTHY.has(value.toLowerCase());
}

/** llama's falsey words (off, disabled, false, 0); case-insensitive here. */
export function isFalsey(value: string): boolean {
  return FALSEY.has(value.toLowerCase());
}

/** The environment variable a negatable flag also answers to: LLAMA_ARG_X -> LLAMA_ARG_NO_X. */
export function negatedEnv(env: string): string | undefined {
  return env.startsWith("LLAMA_ARG_") ? "LLAMA_ARG_NO_" + env.slice("LLAMA_ARG_".length) : undefined;
}

/** All spellings of a flag, positive then negated. */
export function spellings(def: FlagDef): readonly string[] {
  return def.negNames ? [...def.names, ...def.negNames] : def.names;
}
