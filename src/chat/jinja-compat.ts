// bloomery chat: makes @huggingface/jinja behave like llama.cpp's jinja engine where the two
// differ (common/jinja): how values print, `| string`, string concatenation with none, loops
// over undefined, filters on undefined/none, and list.append/pop, str.format, min/max/sum.
// Applied once, to the interpreter's prototype, by installJinjaCompat().
import { Environment, Interpreter, type parse } from "@huggingface/jinja";
import { type JsonTree, llamaJson } from "./jinja-json.ts";

type Program = ReturnType<typeof parse>;
type RV = ReturnType<Environment["set"]>;
type Ctor<T> = new (value: T) => RV;
interface Node {
  type: string;
  [key: string]: unknown;
}
type Fn = (this: unknown, ...args: unknown[]) => unknown;

const probe = new Environment();
const StringValue = probe.set("s", "").constructor as Ctor<string>;
const IntegerValue = probe.set("i", 1).constructor as Ctor<number>;
const FloatValue = probe.set("f", 0.5).constructor as Ctor<number>;
const BooleanValue = probe.set("b", true).constructor as Ctor<boolean>;
const NullValue = probe.set("n", null).constructor as Ctor<null>;
const UndefinedValue = probe.set("u", undefined).constructor as Ctor<undefined>;
const ArrayValue = probe.set("a", []).constructor as Ctor<RV[]>;
const ObjectValue = probe.set("o", {}).constructor as Ctor<Map<string, RV>>;
const FunctionValue = probe.set("fn", () => null).constructor as Ctor<(args: RV[], scope: Environment) => RV>;

const CONST = "__bloomeryConst";
const FOR_ITERABLE = "__bloomeryForIterable";

function val<T>(v: RV): T {
  return (v as unknown as { value: T }).value;
}

/** llama's float to string: fixed 6 decimals, trailing zeros cut, one kept ("2.0", "0.5"). */
function floatString(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  let s = x.toFixed(6);
  s = s.replace(/0+$/, "");
  if (s.endsWith(".")) s += "0";
  return s;
}

/** Python-like repr of a value inside a container (strings quoted). */
function repr(v: RV): string {
  if (v instanceof StringValue) {
    const s = val<string>(v);
    return s.includes("'") ? JSON.stringify(s) : `'${s}'`;
  }
  return llamaString(v);
}

/** llama's `as_string()`: what `| string` and `~` give. */
export function llamaString(v: RV): string {
  if (v instanceof StringValue) return val<string>(v);
  if (v instanceof BooleanValue) return val<boolean>(v) ? "True" : "False";
  if (v instanceof IntegerValue) return String(val<number>(v));
  if (v instanceof FloatValue) return floatString(val<number>(v));
  if (v instanceof NullValue) return "None";
  if (v instanceof UndefinedValue) return "";
  if (v instanceof ArrayValue) return `[${val<RV[]>(v).map(repr).join(", ")}]`;
  if (v instanceof ObjectValue) {
    return `{${[...val<Map<string, RV>>(v)].map(([k, x]) => `${repr(new StringValue(k))}: ${repr(x)}`).join(", ")}}`;
  }
  return "";
}

/** What `{{ v }}` prints in llama: scalars, arrays flattened; none, undefined and objects nothing. */
function llamaPrint(v: RV): string {
  if (v instanceof StringValue) return val<string>(v);
  if (v instanceof IntegerValue || v instanceof FloatValue || v instanceof BooleanValue) return llamaString(v);
  if (v instanceof ArrayValue) return val<RV[]>(v).map(llamaPrint).join("");
  return "";
}

/** Reads an interpreter value as a JSON tree (functions become null, as in llama). */
function toTree(v: RV): JsonTree {
  if (v instanceof StringValue) return { kind: "string", v: val<string>(v) };
  if (v instanceof BooleanValue) return { kind: "bool", v: val<boolean>(v) };
  if (v instanceof IntegerValue) return { kind: "int", v: val<number>(v) };
  if (v instanceof FloatValue) return { kind: "float", v: val<number>(v) };
  if (v instanceof ArrayValue) return { kind: "array", items: val<RV[]>(v).map(toTree) };
  const inner = val<unknown>(v);
  if (inner instanceof Map) {
    return { kind: "object", entries: [...(inner as Map<string, RV>).entries()].map(([k, x]) => [k, toTree(x)] as [string, JsonTree]) };
  }
  return { kind: "null" };
}

/** `x | tojson(ensure_ascii, indent, separators, sort_keys)`, positional or by keyword. */
function tojson(operand: RV, args: RV[], kwargs: Map<string, RV>): RV {
  const arg = (name: string, pos: number): RV | undefined => kwargs.get(name) ?? args[pos];
  const ascii = arg("ensure_ascii", 0);
  const indentArg = arg("indent", 1);
  const seps = arg("separators", 2);
  const sort = arg("sort_keys", 3);
  const indent = indentArg instanceof IntegerValue ? val<number>(indentArg) : -1;
  const sepList = seps instanceof ArrayValue ? val<RV[]>(seps).map((x) => llamaString(x)) : [];
  return new StringValue(
    llamaJson(toTree(operand), {
      indent,
      itemSep: sepList[0] ?? (indent < 0 ? ", " : ","),
      keySep: sepList[1] ?? ": ",
      ensureAscii: ascii !== undefined && val<unknown>(ascii) === true,
      sortKeys: sort !== undefined && val<unknown>(sort) === true,
    }),
  );
}

/** Empty results of filters applied to undefined (llama's value_undefined builtins). */
const ON_UNDEFINED: Record<string, () => RV> = {};
for (const f of ["capitalize", "join", "lower", "replace", "safe", "string", "strip", "title", "truncate", "upper", "trim"]) {
  ON_UNDEFINED[f] = () => new StringValue("");
}
for (const f of ["items", "list", "map", "reject", "rejectattr", "reverse", "select", "selectattr", "sort", "unique"]) {
  ON_UNDEFINED[f] = () => new ArrayValue([]);
}
for (const f of ["length", "sum", "wordcount", "count"]) ON_UNDEFINED[f] = () => new IntegerValue(0);
for (const f of ["first", "last", "max", "min"]) ON_UNDEFINED[f] = () => new UndefinedValue(undefined);

/** ... and to none (llama's value_none builtins). */
const ON_NONE: Record<string, () => RV> = {
  string: () => new StringValue("None"),
  safe: () => new StringValue("None"),
};
for (const f of ["items", "map", "reject", "rejectattr", "select", "selectattr", "unique"]) ON_NONE[f] = () => new ArrayValue([]);

function compare(a: RV, b: RV): number {
  const x = val<unknown>(a);
  const y = val<unknown>(b);
  if (typeof x === "number" && typeof y === "number") return x - y;
  if (typeof x === "string" && typeof y === "string") return x < y ? -1 : x > y ? 1 : 0;
  throw new Error(`cannot compare ${a.type} with ${b.type}`);
}

function filterName(node: Node): string | null {
  if (node.type === "Identifier") return node.value as string;
  if (node.type === "CallExpression") {
    const callee = node.callee as Node;
    if (callee.type === "Identifier") return callee.value as string;
  }
  return null;
}

/** Marks the iterable expression of every for loop (llama iterates undefined as empty). */
export function markForIterables(program: Program): void {
  const seen = new Set<object>();
  const walk = (x: unknown): void => {
    if (typeof x !== "object" || x === null || seen.has(x)) return;
    seen.add(x);
    if (Array.isArray(x)) {
      for (const y of x) walk(y);
      return;
    }
    const node = x as Node;
    if (node.type === "For") {
      const it = node.iterable as Node;
      const target = it.type === "SelectExpression" ? (it.lhs as Node) : it;
      target[FOR_ITERABLE] = true;
    }
    for (const k of Object.keys(node)) walk(node[k]);
  };
  walk(program);
}

let installed = false;

/** Patches the interpreter once (idempotent). */
export function installJinjaCompat(): void {
  if (installed) return;
  installed = true;
  const proto = Interpreter.prototype as unknown as Record<string, Fn>;

  const evaluate = proto.evaluate;
  proto.evaluate = function (this: unknown, node: unknown, env: unknown) {
    const n = node as Node | undefined;
    if (n && n.type === CONST) return n.value;
    const v = evaluate.call(this, node, env) as RV;
    if (n && n[FOR_ITERABLE] === true && v instanceof UndefinedValue) return new ArrayValue([]);
    return v;
  };

  proto.evaluateBlock = function (this: unknown, statements: unknown, env: unknown) {
    let out = "";
    for (const st of statements as unknown[]) out += llamaPrint((this as { evaluate: Fn }).evaluate.call(this, st, env) as RV);
    return new StringValue(out);
  };

  const applyFilter = proto.applyFilter;
  proto.applyFilter = function (this: unknown, operand: unknown, filterNode: unknown, env: unknown) {
    const v = operand as RV;
    const name = filterName(filterNode as Node);
    if (name === "tojson") {
      const fnode = filterNode as Node;
      if (fnode.type === "Identifier") return tojson(v, [], new Map());
      const evalArgs = (this as { evaluateArguments: Fn }).evaluateArguments;
      const [args, kwargs] = evalArgs.call(this, fnode.args, env) as [RV[], Map<string, RV>];
      return tojson(v, args, kwargs);
    }
    if (name !== null && name !== "default") {
      if (v instanceof UndefinedValue && ON_UNDEFINED[name]) return ON_UNDEFINED[name]();
      if (v instanceof NullValue && ON_NONE[name]) return ON_NONE[name]();
      if (name === "string") return new StringValue(llamaString(v));
      if (v instanceof ArrayValue && (name === "min" || name === "max")) {
        const items = val<RV[]>(v);
        if (items.length === 0) return new UndefinedValue(undefined);
        return items.reduce((a, b) => ((name === "min" ? compare(b, a) < 0 : compare(b, a) > 0) ? b : a));
      }
      if (v instanceof ArrayValue && name === "sum") {
        let total = 0;
        let float = false;
        for (const x of val<RV[]>(v)) {
          if (!(x instanceof IntegerValue || x instanceof FloatValue)) throw new Error("sum: items must be numbers");
          float ||= x instanceof FloatValue;
          total += val<number>(x);
        }
        return float ? new FloatValue(total) : new IntegerValue(total);
      }
    }
    return applyFilter.call(this, operand, filterNode, env);
  };

  const binary = proto.evaluateBinaryExpression;
  proto.evaluateBinaryExpression = function (this: unknown, node: unknown, env: unknown) {
    const n = node as Node;
    const op = (n.operator as Node).value as string;
    if (op !== "+" && op !== "~") return binary.call(this, node, env);
    const ev = (this as { evaluate: Fn }).evaluate;
    const l = ev.call(this, n.left, env) as RV;
    const r = ev.call(this, n.right, env) as RV;
    const isStr = (x: RV) => x instanceof StringValue;
    const isNil = (x: RV) => x instanceof NullValue || x instanceof UndefinedValue;
    if ((isNil(l) && isStr(r)) || (isStr(l) && isNil(r))) {
      return new StringValue((isNil(l) ? "" : val<string>(l)) + (isNil(r) ? "" : val<string>(r)));
    }
    if (!isNil(l) && !isNil(r) && (isStr(l) || isStr(r))) return new StringValue(llamaString(l) + llamaString(r));
    return binary.call(this, { ...n, left: { type: CONST, value: l }, right: { type: CONST, value: r } }, env);
  };

  // list.append / list.pop, and a fresh `length` attribute after either
  const arrayBuiltins = Object.getOwnPropertyDescriptor((ArrayValue as unknown as { prototype: object }).prototype, "builtins");
  if (arrayBuiltins?.get) {
    const get = arrayBuiltins.get;
    Object.defineProperty((ArrayValue as unknown as { prototype: object }).prototype, "builtins", {
      configurable: true,
      get(this: RV) {
        const map = get.call(this) as Map<string, RV>;
        const items = val<RV[]>(this);
        map.set("length", new IntegerValue(items.length));
        if (!map.has("append")) {
          map.set("append", new FunctionValue((args) => {
            items.push(args[0] ?? new UndefinedValue(undefined));
            return new NullValue(null);
          }));
          map.set("pop", new FunctionValue((args) => {
            if (items.length === 0) throw new Error("pop from empty list");
            let i = args[0] instanceof IntegerValue ? val<number>(args[0]) : -1;
            if (i < 0) i += items.length;
            if (i < 0 || i >= items.length) throw new Error("pop index out of range");
            return items.splice(i, 1)[0];
          }));
        }
        return map;
      },
    });
  }

  // str.format with '{}' placeholders (as llama supports it)
  const stringBuiltins = Object.getOwnPropertyDescriptor((StringValue as unknown as { prototype: object }).prototype, "builtins");
  if (stringBuiltins?.get) {
    const get = stringBuiltins.get;
    Object.defineProperty((StringValue as unknown as { prototype: object }).prototype, "builtins", {
      configurable: true,
      get(this: RV) {
        const map = get.call(this) as Map<string, RV>;
        if (!map.has("format")) {
          const fmt = val<string>(this);
          map.set("format", new FunctionValue((args) => {
            let out = "";
            let k = 0;
            for (let i = 0; i < fmt.length; i++) {
              if (fmt[i] !== "{") {
                out += fmt[i];
                continue;
              }
              if (fmt[i + 1] !== "}") throw new Error("format() only supports simple '{}' placeholders");
              i++;
              const a = args[k++];
              out += a ? llamaString(a) : "";
            }
            return new StringValue(out);
          }));
        }
        return map;
      },
    });
  }
}
