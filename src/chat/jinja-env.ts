// bloomery chat: the @huggingface/jinja glue: compiling a template, building its variables
// (optionally with key-access tracking for capability probes) and running it with llama's globals.
import { Environment, Interpreter, parse, tokenize } from "@huggingface/jinja";
import { TemplateError } from "./errors.ts";
import { installJinjaCompat, markForIterables } from "./jinja-compat.ts";
import { strftime } from "./strftime.ts";

installJinjaCompat();

export type Program = ReturnType<typeof parse>;
type RuntimeValue = ReturnType<Environment["set"]>;
type Ctor<T> = new (value: T) => RuntimeValue;

// The library exports its interpreter but not its value classes; take them from the values it
// makes, so that values built here are instances of the very classes the interpreter tests for.
const probe = new Environment();
const ObjectValue = probe.set("o", {}).constructor as Ctor<Map<string, RuntimeValue>>;
const ArrayValue = probe.set("a", []).constructor as Ctor<RuntimeValue[]>;
const StringValue = probe.set("s", "").constructor as Ctor<string>;
const IntegerValue = probe.set("i", 1).constructor as Ctor<number>;
const FloatValue = probe.set("f", 0.5).constructor as Ctor<number>;
const BooleanValue = probe.set("b", true).constructor as Ctor<boolean>;
const NullValue = probe.set("n", null).constructor as Ctor<null>;
const UndefinedValue = probe.set("u", undefined).constructor as Ctor<undefined>;
const FunctionValue = probe.set("fn", () => null).constructor as Ctor<
  (args: RuntimeValue[], scope: Environment) => RuntimeValue
>;

/**
 * A Map that records which keys a template read. `get` marks one key; iterating entries or
 * values (a `for` over `items()`, `tojson`, `|string`) marks every key. Used by the capability
 * probes the way llama.cpp's jinja engine marks values "used".
 */
export class TrackingMap extends Map<string, RuntimeValue> {
  readonly used = new Set<string>();
  override get(key: string): RuntimeValue | undefined {
    this.used.add(key);
    return super.get(key);
  }
  private markAll(): void {
    for (const k of super.keys()) this.used.add(k);
  }
  override entries(): MapIterator<[string, RuntimeValue]> {
    this.markAll();
    return super.entries();
  }
  override values(): MapIterator<RuntimeValue> {
    this.markAll();
    return super.values();
  }
  override forEach(cb: (v: RuntimeValue, k: string, m: Map<string, RuntimeValue>) => void, self?: unknown): void {
    this.markAll();
    super.forEach(cb, self);
  }
  override [Symbol.iterator](): MapIterator<[string, RuntimeValue]> {
    this.markAll();
    return super[Symbol.iterator]();
  }
}

/** Where the tracking maps of one conversion are collected: the JS object -> its map. */
export type TrackedMaps = WeakMap<object, TrackingMap>;

/** Converts a JSON-like JS value to the interpreter's values; with `track`, objects get TrackingMaps. */
export function toRuntime(value: unknown, track?: TrackedMaps): RuntimeValue {
  switch (typeof value) {
    case "string":
      return new StringValue(value);
    case "number":
      return Number.isInteger(value) ? new IntegerValue(value) : new FloatValue(value);
    case "boolean":
      return new BooleanValue(value);
    case "undefined":
      return new UndefinedValue(undefined);
    case "object": {
      if (value === null) return new NullValue(null);
      if (Array.isArray(value)) return new ArrayValue(value.map((v) => toRuntime(v, track)));
      const entries = Object.entries(value as Record<string, unknown>).map(
        ([k, v]) => [k, toRuntime(v, track)] as [string, RuntimeValue],
      );
      if (track) {
        const map = new TrackingMap(entries);
        track.set(value, map);
        return new ObjectValue(map);
      }
      return new ObjectValue(new Map(entries));
    }
    default:
      throw new TypeError(`cannot pass a ${typeof value} to a chat template`);
  }
}

/** Parses template source with the options transformers (and llama.cpp) use. */
export function compileTemplate(source: string): Program {
  try {
    const program = parse(tokenize(source, { lstrip_blocks: true, trim_blocks: true }));
    markForIterables(program);
    return program;
  } catch (e) {
    throw new TemplateError("parse", e instanceof Error ? e.message : String(e));
  }
}

function stringArg(args: RuntimeValue[], fn: string): string {
  const a = args[0];
  if (!a || !(a instanceof StringValue)) throw new TemplateError("render", `${fn}() expects a string argument`);
  return (a as unknown as { value: string }).value;
}

function intArg(a: RuntimeValue | undefined): number {
  if (!a || !(a instanceof IntegerValue)) throw new TemplateError("render", "range() expects integer arguments");
  return (a as unknown as { value: number }).value;
}

function rangeFn(args: RuntimeValue[]): RuntimeValue {
  if (args.length < 1 || args.length > 3) throw new TemplateError("render", "range() takes 1 to 3 arguments");
  const [start, stop, step] =
    args.length === 1 ? [0, intArg(args[0]), 1] : [intArg(args[0]), intArg(args[1]), args.length === 3 ? intArg(args[2]) : 1];
  if (step === 0) throw new TemplateError("render", "range() step argument must not be zero");
  const out: RuntimeValue[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(new IntegerValue(i));
  return new ArrayValue(out);
}

export interface RunOptions {
  /** The clock `strftime_now` reads. */
  now: Date;
  /** Variables already converted (e.g. with tracking); set after the globals, overriding them. */
  vars: Map<string, RuntimeValue>;
  /** When given, the global scope's variable map records which names were read. */
  trackGlobals?: TrackingMap;
}

/** Converts variables to interpreter values (helper for callers building `RunOptions.vars`). */
export function toVars(vars: Record<string, unknown>, track?: TrackedMaps): Map<string, RuntimeValue> {
  const out = new Map<string, RuntimeValue>();
  for (const [k, v] of Object.entries(vars)) out.set(k, toRuntime(v, track));
  return out;
}

/** Runs a compiled template; failures become TemplateError ("raise" for raise_exception). */
export function runTemplate(program: Program, opts: RunOptions): string {
  const env = new Environment();
  if (opts.trackGlobals) {
    for (const [k, v] of env.variables) opts.trackGlobals.set(k, v);
    env.variables = opts.trackGlobals;
  }
  const globals: [string, RuntimeValue][] = [
    ["true", new BooleanValue(true)],
    ["false", new BooleanValue(false)],
    ["none", new NullValue(null)],
    ["True", new BooleanValue(true)],
    ["False", new BooleanValue(false)],
    ["None", new NullValue(null)],
    [
      "raise_exception",
      new FunctionValue((args) => {
        throw new TemplateError("raise", args[0] ? String((args[0] as unknown as { value: unknown }).value) : "");
      }),
    ],
    ["strftime_now", new FunctionValue((args) => new StringValue(strftime(opts.now, stringArg(args, "strftime_now"))))],
    ["range", new FunctionValue((args) => rangeFn(args))],
  ];
  for (const [k, v] of globals) env.setVariable(k, v);
  for (const [k, v] of opts.vars) env.setVariable(k, v);
  try {
    const result = new Interpreter(env).run(program) as unknown as { value: unknown };
    return String(result.value);
  } catch (e) {
    if (e instanceof TemplateError) throw e;
    throw new TemplateError("render", e instanceof Error ? e.message : String(e));
  }
}
