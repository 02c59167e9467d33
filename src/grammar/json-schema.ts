// bloomery grammar: JSON schema to GBNF, covering what llama.cpp's json-schema-to-grammar covers (types, objects, arrays, enum/const, anyOf/oneOf/allOf, $ref, bounds, patterns, formats).
import { JsonSchemaError } from "./errors.ts";
import { gbnfLiteral } from "./gbnf-text.ts";
import { PatternError, patternToGbnf } from "./regex-to-gbnf.ts";
import { PRIMITIVE_RULES, RESERVED_RULE_NAMES, integerRangeRule } from "./schema-rules.ts";
import { alternativesOf, hasConstraints, isObject, resolvePointer, type Json, type JsonObject } from "./schema-merge.ts";
import { notStringsRule } from "./schema-keys.ts";

export interface JsonSchemaConversion {
  /** The grammar (rule `root` matches the documents the schema allows, without surrounding whitespace). */
  readonly gbnf: string;
  /** Keywords that were present but are not enforced by the grammar (e.g. uniqueItems, number minimum). */
  readonly warnings: string[];
}

/** Keywords the converter knows it does not enforce (warned about, as llama.cpp skips them). */
const UNENFORCED = new Set([
  "not",
  "if",
  "then",
  "else",
  "uniqueItems",
  "contains",
  "minContains",
  "maxContains",
  "patternProperties",
  "propertyNames",
  "dependentRequired",
  "dependentSchemas",
  "dependencies",
  "minProperties",
  "maxProperties",
  "multipleOf",
  "unevaluatedProperties",
  "unevaluatedItems",
  "$anchor",
  "$dynamicRef",
  "$dynamicAnchor",
  "$recursiveRef",
]);
const MAX_SCHEMA_DEPTH = 200;
const INTEGER_BOUNDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];
const STRING_KEYS = ["pattern", "minLength", "maxLength", "format"];

function sanitize(name: string): string {
  return name.replace(/[^a-zA-Z0-9-]+/g, "-");
}

function count(s: JsonObject, key: string, path: string): number | undefined {
  const v = s[key];
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0) throw new JsonSchemaError(path, `${key} must be a non-negative integer`);
  return v;
}

/** `unit` repeated min..max times (max Infinity = unbounded); "" when max is 0. */
function repeat(unit: string, min: number, max: number): string {
  if (max === 0) return "";
  if (min === 0 && max === Infinity) return `${unit}*`;
  if (min === 1 && max === Infinity) return `${unit}+`;
  if (min === 0 && max === 1) return `${unit}?`;
  if (min === max) return `${unit}{${min}}`;
  return `${unit}{${min},${max === Infinity ? "" : max}}`;
}

/** `item` repeated min..max times with `"," space` between; "" when max is 0. */
function listOf(item: string, min: number, max: number): string {
  if (max === 0) return "";
  const rest = repeat(`("," space ${item})`, Math.max(min - 1, 0), max - 1);
  const body = rest === "" ? item : `${item} ${rest}`;
  return min === 0 ? `(${body})?` : body;
}

class Converter {
  readonly rules = new Map<string, string>();
  readonly refRules = new Map<string, string>();
  readonly warnings: string[] = [];

  constructor(readonly root: Json) {}

  warn(path: string, text: string): void {
    this.warnings.push(`${path}: ${text}`);
  }

  /** Add rule `name ::= body`, renaming (name1, name2, ...) when the name is taken by another body. */
  addRule(name: string, body: string): string {
    const base = sanitize(name) || "rule";
    let key = base;
    for (let i = 0; this.rules.has(key) && this.rules.get(key) !== body; i++) key = `${base}${i}`;
    this.rules.set(key, body);
    return key;
  }

  /** A fresh rule name, reserved (for $ref targets, which may refer to themselves). */
  reserve(name: string): string {
    const base = sanitize(name) || "rule";
    let key = base;
    for (let i = 0; this.rules.has(key); i++) key = `${base}${i}`;
    this.rules.set(key, "");
    return key;
  }

  primitive(name: string): string {
    const p = PRIMITIVE_RULES[name];
    if (!this.rules.has(name)) {
      this.rules.set(name, p.body);
      for (const d of p.deps) this.primitive(d);
    }
    return name;
  }

  private depth = 0;

  /** Convert `schema` into a rule and return the rule's name. `name` is the path-derived name ("" at the root). */
  visit(schema: Json, name: string, path: string): string {
    const ruleName = name === "" ? "root" : RESERVED_RULE_NAMES.has(name) ? `${name}-` : name;
    if (++this.depth > MAX_SCHEMA_DEPTH) throw new JsonSchemaError(path, `schema nests deeper than ${MAX_SCHEMA_DEPTH} levels`);
    try {
      return this.addRule(ruleName, this.body(schema, name, path));
    } finally {
      this.depth--;
    }
  }

  /** A GBNF expression for `schema`. */
  body(schema: Json, name: string, path: string): string {
    if (schema === true) return this.primitive("value");
    if (schema === false) throw new JsonSchemaError(path, "schema `false` matches nothing");
    if (!isObject(schema)) throw new JsonSchemaError(path, "schema must be an object or a boolean");
    const sub = name === "" ? "" : `${name}-`;

    if (schema.allOf !== undefined || (hasConstraints(schema, ["anyOf", "oneOf"]) && (schema.anyOf !== undefined || schema.oneOf !== undefined)) || (schema.$ref !== undefined && hasConstraints(schema, ["$ref"]))) {
      const alts = alternativesOf(schema, this.root, path);
      if (alts.length === 0) throw new JsonSchemaError(path, "schema matches nothing");
      if (alts.length === 1) return this.body(alts[0], name, path);
      return alts.map((a, i) => this.visit(a, `${sub || "alternative-"}${i}`, `${path}/allOf`)).join(" | ");
    }
    if (schema.$ref !== undefined) return this.ref(schema.$ref, path);
    for (const key of ["anyOf", "oneOf"] as const) {
      const list = schema[key];
      if (list === undefined) continue;
      if (!Array.isArray(list) || list.length === 0) throw new JsonSchemaError(`${path}/${key}`, `${key} must be a non-empty array of schemas`);
      const alts = list.filter((s) => s !== false);
      if (alts.length === 0) throw new JsonSchemaError(`${path}/${key}`, "every alternative is `false`");
      return alts.map((s, i) => this.visit(s, `${sub || "alternative-"}${i}`, `${path}/${key}/${i}`)).join(" | ");
    }
    if (Array.isArray(schema.type)) {
      if (schema.type.length === 0) throw new JsonSchemaError(path, "type must not be an empty array");
      return schema.type.map((t, i) => this.visit({ ...schema, type: t }, `${sub}type-${i}`, `${path}/type/${i}`)).join(" | ");
    }
    for (const k of Object.keys(schema)) if (UNENFORCED.has(k)) this.warn(path, `"${k}" is not enforced`);
    if (schema.const !== undefined) return gbnfLiteral(JSON.stringify(schema.const));
    if (schema.enum !== undefined) {
      if (!Array.isArray(schema.enum) || schema.enum.length === 0) throw new JsonSchemaError(path, "enum must be a non-empty array");
      return `(${schema.enum.map((v) => gbnfLiteral(JSON.stringify(v))).join(" | ")})`;
    }
    const type = schema.type;
    if (type !== undefined && typeof type !== "string") throw new JsonSchemaError(path, "type must be a string or an array of strings");
    const looksObject = schema.properties !== undefined || (schema.additionalProperties !== undefined && schema.additionalProperties !== true);
    switch (type) {
      case "object":
        return this.object(schema, name, path);
      case "array":
        return this.array(schema, name, path);
      case "string":
        return this.string(schema, name, path);
      case "integer":
        return this.integer(schema, path);
      case "number":
        for (const k of INTEGER_BOUNDS) if (schema[k] !== undefined) this.warn(path, `"${k}" is only enforced for integers, not numbers`);
        return this.primitive("number");
      case "boolean":
        return this.primitive("boolean");
      case "null":
        return this.primitive("null");
      case undefined:
        if (looksObject) return this.object(schema, name, path);
        if (schema.items !== undefined || schema.prefixItems !== undefined) return this.array(schema, name, path);
        if (STRING_KEYS.some((k) => schema[k] !== undefined)) return this.string(schema, name, path);
        for (const k of INTEGER_BOUNDS) if (schema[k] !== undefined) this.warn(path, `"${k}" without a type is not enforced`);
        return this.primitive("value");
      default:
        throw new JsonSchemaError(path, `unknown type ${JSON.stringify(type)}`);
    }
  }

  ref(ref: Json, path: string): string {
    if (typeof ref !== "string") throw new JsonSchemaError(path, "$ref must be a string");
    const known = this.refRules.get(ref);
    if (known !== undefined) return known;
    const target = resolvePointer(this.root, ref, path);
    const name = this.reserve(`ref${sanitize(ref.slice(1))}`);
    this.refRules.set(ref, name);
    if (++this.depth > MAX_SCHEMA_DEPTH) throw new JsonSchemaError(path, `schema nests deeper than ${MAX_SCHEMA_DEPTH} levels`);
    try {
      this.rules.set(name, this.body(target, name, ref));
    } finally {
      this.depth--;
    }
    return name;
  }

  object(s: JsonObject, name: string, path: string): string {
    const sub = name === "" ? "" : `${name}-`;
    const props = s.properties ?? {};
    if (!isObject(props)) throw new JsonSchemaError(path, "properties must be an object");
    const required = new Set<string>();
    if (s.required !== undefined) {
      if (!Array.isArray(s.required)) throw new JsonSchemaError(path, "required must be an array of strings");
      for (const r of s.required) {
        if (typeof r !== "string") throw new JsonSchemaError(path, "required must be an array of strings");
        required.add(r);
      }
    }
    const additional = s.additionalProperties === undefined ? (s.properties === undefined ? true : false) : s.additionalProperties;
    if (typeof additional !== "boolean" && !isObject(additional)) throw new JsonSchemaError(path, "additionalProperties must be a boolean or a schema");
    if (Object.keys(props).length === 0 && additional === true) return this.primitive("object");

    const kv = new Map<string, string>();
    const requiredKeys: string[] = [];
    const optionalKeys: string[] = [];
    const names: string[] = [];
    for (const [prop, ps] of Object.entries(props)) {
      if (ps === false) {
        if (required.has(prop)) throw new JsonSchemaError(`${path}/properties/${prop}`, `required property "${prop}" has schema false`);
        continue;
      }
      const propName = `${sub}${prop === "" ? "empty-key" : prop}`;
      const valueRule = this.visit(ps, propName, `${path}/properties/${prop}`);
      kv.set(prop, this.addRule(`${propName}-kv`, `${gbnfLiteral(JSON.stringify(prop))} space ":" space ${valueRule}`));
      (required.has(prop) ? requiredKeys : optionalKeys).push(prop);
      names.push(prop);
    }
    this.primitive("space");
    for (const r of required) {
      if (!(r in props)) this.warn(path, `required property "${r}" is not declared; it is not enforced`);
    }
    const extraKey = "\u0000additional";
    if (additional !== false) {
      const valueRule = additional === true ? this.primitive("value") : this.visit(additional, `${sub}additional-value`, `${path}/additionalProperties`);
      const keyRule = names.length === 0 ? this.primitive("string") : this.addRule(`${sub}additional-k`, notStringsRule(names, this.primitive("char")));
      kv.set(extraKey, this.addRule(`${sub}additional-kv`, `${keyRule} ":" space ${valueRule}`));
      optionalKeys.push(extraKey);
    }
    if (requiredKeys.length === 0 && optionalKeys.length === 0) return `"{" space "}"`;

    let body = `"{" space ${requiredKeys.map((k) => kv.get(k)!).join(` "," space `)}`;
    if (optionalKeys.length > 0) {
      const chains: string[] = [];
      for (let i = 0; i < optionalKeys.length; i++) {
        const first = optionalKeys[i];
        const firstKv = kv.get(first)!;
        let chain = first === extraKey ? `${firstKv} ("," space ${firstKv})*` : firstKv;
        for (const k of optionalKeys.slice(i + 1)) chain += ` ("," space ${kv.get(k)!})${k === extraKey ? "*" : "?"}`;
        chains.push(chain);
      }
      const choice = chains.length === 1 ? chains[0] : `(${chains.join(" | ")})`;
      body += requiredKeys.length > 0 ? ` ("," space ${choice})?` : ` ${chains.length === 1 ? `(${choice})` : choice}?`;
    }
    return `${body} space "}"`;
  }

  array(s: JsonObject, name: string, path: string): string {
    const sub = name === "" ? "" : `${name}-`;
    const minItems = count(s, "minItems", path) ?? 0;
    const maxItems = count(s, "maxItems", path) ?? Infinity;
    if (minItems > maxItems) throw new JsonSchemaError(path, "minItems is above maxItems");
    this.primitive("space");
    let prefix: Json[] = [];
    let rest: Json = s.items ?? true;
    if (Array.isArray(s.prefixItems)) {
      prefix = s.prefixItems;
      if (Array.isArray(s.items)) throw new JsonSchemaError(path, "items must be a schema when prefixItems is given");
      rest = s.items ?? false;
    } else if (s.prefixItems !== undefined) {
      throw new JsonSchemaError(path, "prefixItems must be an array of schemas");
    } else if (Array.isArray(s.items)) {
      prefix = s.items;
      rest = s.additionalItems ?? false;
    }
    if (prefix.length === 0 && rest === true && minItems === 0 && maxItems === Infinity) return this.primitive("array");
    const parts: string[] = [];
    const nPrefix = Math.min(prefix.length, maxItems);
    for (let i = 0; i < nPrefix; i++) parts.push(this.visit(prefix[i], `${sub}tuple-${i}`, `${path}/prefixItems/${i}`));
    let tail = "";
    const extraMin = Math.max(0, minItems - nPrefix);
    const extraMax = maxItems - nPrefix;
    if (rest !== false && extraMax > 0) {
      const item = this.visit(rest, `${sub}item`, `${path}/items`);
      tail = nPrefix === 0 ? listOf(item, extraMin, extraMax) : repeat(`("," space ${item})`, extraMin, extraMax);
    } else if (extraMin > 0) {
      throw new JsonSchemaError(path, `minItems ${minItems} cannot be met: only ${nPrefix} items are allowed`);
    }
    const head = parts.join(` "," space `);
    const inner = [head, tail].filter((x) => x !== "").join(" ");
    return inner === "" ? `"[" space "]"` : `"[" space ${inner} space "]"`;
  }

  string(s: JsonObject, name: string, path: string): string {
    const minLength = count(s, "minLength", path);
    const maxLength = count(s, "maxLength", path);
    if (s.pattern !== undefined) {
      if (typeof s.pattern !== "string") throw new JsonSchemaError(path, "pattern must be a string");
      if (minLength !== undefined || maxLength !== undefined) this.warn(path, "minLength / maxLength are not enforced together with pattern");
      if (s.format !== undefined) this.warn(path, "format is not enforced together with pattern");
      try {
        const inner = patternToGbnf(s.pattern, this.primitive("char"));
        return `"\\"" ${inner === "" ? "" : `${this.addRule(`${name || "root"}-pattern`, inner)} `}"\\""`;
      } catch (e) {
        if (e instanceof PatternError) throw new JsonSchemaError(`${path}/pattern`, e.message);
        throw e;
      }
    }
    if (s.format !== undefined) {
      if (typeof s.format !== "string") throw new JsonSchemaError(path, "format must be a string");
      if (s.format === "date" || s.format === "time" || s.format === "date-time") return this.primitive(`${s.format}-string`);
      if (/^uuid[1-5]?$/.test(s.format)) return this.primitive("uuid");
      this.warn(path, `format "${s.format}" is not enforced`);
    }
    if (minLength !== undefined || maxLength !== undefined) {
      const lo = minLength ?? 0;
      const hi = maxLength ?? Infinity;
      if (lo > hi) throw new JsonSchemaError(path, "minLength is above maxLength");
      const ch = this.primitive("char");
      const rep = hi === 0 ? "" : lo === hi ? `${ch}{${lo}}` : `${ch}{${lo},${hi === Infinity ? "" : hi}}`;
      return rep === "" ? `"\\"" "\\""` : `"\\"" ${rep} "\\""`;
    }
    return this.primitive("string");
  }

  integer(s: JsonObject, path: string): string {
    const bound = (key: string): number | undefined => {
      const v = s[key];
      if (v === undefined || typeof v === "boolean") return undefined;
      if (typeof v !== "number" || !Number.isFinite(v)) throw new JsonSchemaError(path, `${key} must be a number`);
      return v;
    };
    let min: bigint | null = null;
    let max: bigint | null = null;
    const minimum = bound("minimum");
    const maximum = bound("maximum");
    const exMin = bound("exclusiveMinimum");
    const exMax = bound("exclusiveMaximum");
    if (minimum !== undefined) min = BigInt(s.exclusiveMinimum === true ? Math.floor(minimum) + 1 : Math.ceil(minimum));
    if (exMin !== undefined) {
      const m = BigInt(Math.floor(exMin) + 1);
      min = min === null || m > min ? m : min;
    }
    if (maximum !== undefined) max = BigInt(s.exclusiveMaximum === true ? Math.ceil(maximum) - 1 : Math.floor(maximum));
    if (exMax !== undefined) {
      const m = BigInt(Math.ceil(exMax) - 1);
      max = max === null || m < max ? m : max;
    }
    if (min === null && max === null) return this.primitive("integer");
    if (min !== null && max !== null && min > max) throw new JsonSchemaError(path, `no integer lies between the minimum ${min} and the maximum ${max}`);
    return `(${integerRangeRule(min, max)})`;
  }

  format(): string {
    const names = [...this.rules.keys()].sort();
    return names.map((n) => `${n} ::= ${this.rules.get(n)}\n`).join("");
  }
}

/** Convert a JSON schema; returns the grammar and what the grammar does not enforce. Throws `JsonSchemaError`. */
export function convertJsonSchema(schema: unknown): JsonSchemaConversion {
  if (schema !== true && schema !== false && !isObject(schema)) throw new JsonSchemaError("#", "schema must be an object or a boolean");
  const c = new Converter(schema as Json);
  const rootName = c.visit(schema as Json, "", "#");
  if (rootName !== "root") c.rules.set("root", rootName);
  return { gbnf: c.format(), warnings: c.warnings };
}

/** GBNF for the documents a JSON schema allows (llama-server's `json_schema`). Throws `JsonSchemaError`. */
export function jsonSchemaToGbnf(schema: object): string {
  return convertJsonSchema(schema).gbnf;
}

/** GBNF for any JSON object (`response_format: {"type": "json_object"}`). */
export const JSON_OBJECT_GBNF: string = jsonSchemaToGbnf({ type: "object" });
