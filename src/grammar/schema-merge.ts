// bloomery grammar: JSON-schema $ref resolution (same-document JSON pointers) and the merging of allOf / anyOf-with-siblings into plain alternatives.
import { JsonSchemaError } from "./errors.ts";

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = { [key: string]: Json };

export function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** JSON text with object keys sorted: equal values give equal text. */
export function canonicalJson(v: Json): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(",")}]`;
  if (isObject(v)) {
    return `{${Object.keys(v)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(v[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v);
}

/** Keywords that only annotate (dropped when merging, never warned about). */
export const ANNOTATION_KEYS: ReadonlySet<string> = new Set([
  "title",
  "description",
  "default",
  "examples",
  "$schema",
  "$id",
  "$comment",
  "deprecated",
  "readOnly",
  "writeOnly",
  "$defs",
  "definitions",
  "contentMediaType",
  "contentEncoding",
  "nullable",
  "discriminator",
]);

/** Whether a schema object carries any keyword besides annotations and those in `except`. */
export function hasConstraints(s: JsonObject, except: readonly string[]): boolean {
  return Object.keys(s).some((k) => !ANNOTATION_KEYS.has(k) && !except.includes(k));
}

/** Copy of `s` without the keywords in `drop`. */
export function without(s: JsonObject, drop: readonly string[]): JsonObject {
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(s)) if (!drop.includes(k)) out[k] = v;
  return out;
}

/** Resolve a same-document `$ref` ("#", "#/definitions/x", "#/$defs/x", any JSON pointer). */
export function resolvePointer(root: Json, ref: string, path: string): Json {
  if (!ref.startsWith("#")) {
    throw new JsonSchemaError(path, `$ref ${JSON.stringify(ref)} is not supported: only references into the same document ("#/...") are`);
  }
  const pointer = ref.slice(1);
  if (pointer === "") return root;
  if (!pointer.startsWith("/")) throw new JsonSchemaError(path, `$ref ${JSON.stringify(ref)} is not supported: anchors ("#name") are not; use a JSON pointer`);
  let target: Json = root;
  for (const raw of pointer.slice(1).split("/")) {
    let token: string;
    try {
      token = decodeURIComponent(raw).replace(/~1/g, "/").replace(/~0/g, "~");
    } catch {
      throw new JsonSchemaError(path, `$ref ${JSON.stringify(ref)} is not a valid JSON pointer`);
    }
    if (Array.isArray(target) && /^\d+$/.test(token) && Number(token) < target.length) target = target[Number(token)];
    else if (isObject(target) && Object.prototype.hasOwnProperty.call(target, token)) target = target[token];
    else throw new JsonSchemaError(path, `$ref ${JSON.stringify(ref)} cannot be resolved: ${JSON.stringify(token)} not found`);
  }
  return target;
}

const MAX_ALTERNATIVES = 64;
const MAX_DEPTH = 32;

type TypeName = "string" | "number" | "integer" | "boolean" | "null" | "array" | "object";

function typeSet(t: Json, path: string): Set<TypeName> {
  const names = Array.isArray(t) ? t : [t];
  const out = new Set<TypeName>();
  for (const n of names) {
    if (n !== "string" && n !== "number" && n !== "integer" && n !== "boolean" && n !== "null" && n !== "array" && n !== "object") {
      throw new JsonSchemaError(path, `unknown type ${JSON.stringify(n)}`);
    }
    out.add(n);
  }
  return out;
}

function intersectTypes(a: Json, b: Json, path: string): Json {
  const sa = typeSet(a, path);
  const sb = typeSet(b, path);
  const out: TypeName[] = [];
  for (const t of sa) {
    if (sb.has(t)) out.push(t);
    else if (t === "integer" && sb.has("number")) out.push("integer");
    else if (t === "number" && sb.has("integer")) out.push("integer");
  }
  const uniq = [...new Set(out)];
  if (uniq.length === 0) throw new JsonSchemaError(path, `allOf combines types ${JSON.stringify(a)} and ${JSON.stringify(b)}, which have no value in common`);
  return uniq.length === 1 ? uniq[0] : uniq;
}

const LOWER_BOUNDS = new Set(["minLength", "minItems", "minProperties", "minimum", "exclusiveMinimum", "minContains"]);
const UPPER_BOUNDS = new Set(["maxLength", "maxItems", "maxProperties", "maximum", "exclusiveMaximum", "maxContains"]);

/** The schema both `a` and `b` describe (plain schemas: no $ref, allOf, anyOf, oneOf at the top). */
export function mergeTwo(a: JsonObject, b: JsonObject, path: string): JsonObject {
  const out: JsonObject = { ...a };
  for (const [k, vb] of Object.entries(b)) {
    if (ANNOTATION_KEYS.has(k)) continue;
    if (!(k in out)) {
      out[k] = vb;
      continue;
    }
    const va = out[k];
    if (canonicalJson(va) === canonicalJson(vb)) continue;
    if (k === "type") out[k] = intersectTypes(va, vb, path);
    else if (k === "required" && Array.isArray(va) && Array.isArray(vb)) out[k] = [...new Set([...va, ...vb])];
    else if (k === "properties" && isObject(va) && isObject(vb)) {
      const props: JsonObject = { ...va };
      for (const [p, s] of Object.entries(vb)) props[p] = p in props ? { allOf: [props[p], s] } : s;
      out[k] = props;
    } else if (k === "additionalProperties" || k === "items") {
      if (va === false || vb === false) out[k] = false;
      else if (va === true) out[k] = vb;
      else if (vb === true) out[k] = va;
      else if (k === "items" && (Array.isArray(va) || Array.isArray(vb))) throw new JsonSchemaError(path, "allOf combines tuple `items` with other `items`; not supported");
      else out[k] = { allOf: [va, vb] };
    } else if (k === "prefixItems" && Array.isArray(va) && Array.isArray(vb)) {
      const n = Math.max(va.length, vb.length);
      out[k] = Array.from({ length: n }, (_, i) => (i < va.length && i < vb.length ? { allOf: [va[i], vb[i]] } : i < va.length ? va[i] : vb[i]));
    } else if (k === "enum" && Array.isArray(va) && Array.isArray(vb)) {
      const keep = new Set(vb.map(canonicalJson));
      const common = va.filter((v) => keep.has(canonicalJson(v)));
      if (common.length === 0) throw new JsonSchemaError(path, "allOf combines enums with no value in common");
      out[k] = common;
    } else if (k === "const") {
      throw new JsonSchemaError(path, "allOf combines two different const values");
    } else if (LOWER_BOUNDS.has(k) && typeof va === "number" && typeof vb === "number") out[k] = Math.max(va, vb);
    else if (UPPER_BOUNDS.has(k) && typeof va === "number" && typeof vb === "number") out[k] = Math.min(va, vb);
    else throw new JsonSchemaError(path, `allOf combines two different values of "${k}"; not supported`);
  }
  return out;
}

/**
 * The plain alternatives (objects without $ref / allOf / anyOf / oneOf / type arrays at the top)
 * whose union is `schema`. `false` gives none; `true` gives `{}`.
 */
export function alternativesOf(schema: Json, root: Json, path: string, depth = 0): JsonObject[] {
  if (depth > MAX_DEPTH) throw new JsonSchemaError(path, "$ref / allOf nesting too deep (a $ref cycle through allOf?)");
  if (schema === true) return [{}];
  if (schema === false) return [];
  if (!isObject(schema)) throw new JsonSchemaError(path, "schema must be an object or a boolean");
  let alts: JsonObject[] = [without(schema, ["$ref", "allOf", "anyOf", "oneOf", "type"])];
  const product = (others: JsonObject[]): void => {
    const next: JsonObject[] = [];
    for (const x of alts) for (const y of others) next.push(mergeTwo(x, y, path));
    if (next.length > MAX_ALTERNATIVES) throw new JsonSchemaError(path, `combining allOf / anyOf gives more than ${MAX_ALTERNATIVES} alternatives`);
    alts = next;
  };
  if (schema.type !== undefined) {
    const types = Array.isArray(schema.type) ? schema.type : [schema.type];
    typeSet(schema.type, path);
    product(types.map((t) => ({ type: t })));
  }
  if (schema.$ref !== undefined) {
    if (typeof schema.$ref !== "string") throw new JsonSchemaError(path, "$ref must be a string");
    product(alternativesOf(resolvePointer(root, schema.$ref, path), root, schema.$ref, depth + 1));
  }
  for (const key of ["anyOf", "oneOf"] as const) {
    const list = schema[key];
    if (list === undefined) continue;
    if (!Array.isArray(list) || list.length === 0) throw new JsonSchemaError(`${path}/${key}`, `${key} must be a non-empty array of schemas`);
    product(list.flatMap((s, i) => alternativesOf(s, root, `${path}/${key}/${i}`, depth + 1)));
  }
  if (schema.allOf !== undefined) {
    const list = schema.allOf;
    if (!Array.isArray(list) || list.length === 0) throw new JsonSchemaError(`${path}/allOf`, "allOf must be a non-empty array of schemas");
    list.forEach((s, i) => product(alternativesOf(s, root, `${path}/allOf/${i}`, depth + 1)));
  }
  return alts;
}
