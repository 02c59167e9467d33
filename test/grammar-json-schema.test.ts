// bloomery tests: JSON schema to GBNF (random documents walked from the grammar validate against the schema; invalid documents are refused; integer ranges and patterns checked against references).
import { describe, expect, test } from "bun:test";
import { GrammarMatcher, JSON_OBJECT_GBNF, JsonSchemaError, convertJsonSchema, jsonSchemaToGbnf, randomDocument } from "../src/grammar/index.ts";

const enc = new TextEncoder();
const dec = new TextDecoder("utf-8", { fatal: true });

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

type J = null | boolean | number | string | J[] | { [k: string]: J };
type S = boolean | { [k: string]: unknown };

function canon(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canon).join(",")}]`;
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canon(o[k])}`)
      .join(",")}}`;
  }
  return JSON.stringify(v);
}

function resolve(root: S, ref: string): S {
  let t: unknown = root;
  if (ref === "#") return root;
  for (const part of ref.slice(2).split("/")) t = (t as Record<string, unknown>)[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  return t as S;
}

function typeOf(v: J): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  return typeof v;
}

const FORMATS: Record<string, RegExp> = {
  date: /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/,
  time: /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
  "date-time": /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
  uuid: /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
};

/** A small validator for the JSON-schema subset the tests use (standard semantics). Returns the problems found. */
function validate(schema: S, v: J, root: S, path = "$"): string[] {
  if (schema === true) return [];
  if (schema === false) return [`${path}: schema false`];
  const s = schema as Record<string, unknown>;
  const errs: string[] = [];
  if (typeof s.$ref === "string") errs.push(...validate(resolve(root, s.$ref), v, root, path));
  if (Array.isArray(s.allOf)) for (const sub of s.allOf) errs.push(...validate(sub as S, v, root, path));
  if (Array.isArray(s.anyOf) && !s.anyOf.some((sub) => validate(sub as S, v, root, path).length === 0)) errs.push(`${path}: no anyOf branch matches`);
  if (Array.isArray(s.oneOf) && s.oneOf.filter((sub) => validate(sub as S, v, root, path).length === 0).length !== 1) errs.push(`${path}: not exactly one oneOf branch matches`);
  if (s.type !== undefined) {
    const types = Array.isArray(s.type) ? (s.type as string[]) : [s.type as string];
    const t = typeOf(v);
    const ok = types.some((ty) => ty === t || (ty === "integer" && typeof v === "number" && Number.isInteger(v)));
    if (!ok) return [...errs, `${path}: type ${t} not in ${types}`];
  }
  if ("const" in s && canon(s.const) !== canon(v)) errs.push(`${path}: not the const`);
  if (Array.isArray(s.enum) && !s.enum.some((e) => canon(e) === canon(v))) errs.push(`${path}: not in enum`);
  if (typeof v === "string") {
    const n = Array.from(v).length;
    if (typeof s.minLength === "number" && n < s.minLength) errs.push(`${path}: too short`);
    if (typeof s.maxLength === "number" && n > s.maxLength) errs.push(`${path}: too long`);
    if (typeof s.pattern === "string" && !new RegExp(s.pattern, "u").test(v)) errs.push(`${path}: pattern ${s.pattern} fails on ${JSON.stringify(v)}`);
    if (typeof s.format === "string" && FORMATS[s.format] && !FORMATS[s.format].test(v)) errs.push(`${path}: not a ${s.format}`);
  }
  if (typeof v === "number") {
    if (typeof s.minimum === "number" && v < s.minimum) errs.push(`${path}: below minimum`);
    if (typeof s.maximum === "number" && v > s.maximum) errs.push(`${path}: above maximum`);
    if (typeof s.exclusiveMinimum === "number" && v <= s.exclusiveMinimum) errs.push(`${path}: not above exclusiveMinimum`);
    if (typeof s.exclusiveMaximum === "number" && v >= s.exclusiveMaximum) errs.push(`${path}: not below exclusiveMaximum`);
  }
  if (Array.isArray(v)) {
    if (typeof s.minItems === "number" && v.length < s.minItems) errs.push(`${path}: too few items`);
    if (typeof s.maxItems === "number" && v.length > s.maxItems) errs.push(`${path}: too many items`);
    const prefix = (Array.isArray(s.prefixItems) ? s.prefixItems : Array.isArray(s.items) ? s.items : []) as S[];
    const rest = (Array.isArray(s.prefixItems) ? s.items : Array.isArray(s.items) ? s.additionalItems : s.items) as S | undefined;
    v.forEach((item, i) => {
      const sub = i < prefix.length ? prefix[i] : rest;
      if (sub !== undefined) errs.push(...validate(sub, item, root, `${path}[${i}]`));
    });
  }
  if (v !== null && typeof v === "object" && !Array.isArray(v)) {
    const props = (s.properties ?? {}) as Record<string, S>;
    for (const r of (s.required ?? []) as string[]) if (!(r in v)) errs.push(`${path}: missing ${r}`);
    for (const [k, val] of Object.entries(v)) {
      if (k in props) errs.push(...validate(props[k], val, root, `${path}.${k}`));
      else if (s.additionalProperties !== undefined) errs.push(...validate(s.additionalProperties as S, val, root, `${path}.${k}`));
    }
  }
  return errs;
}

/** Whole document accepted (fed in random chunks) and the grammar can end after it. */
function accepts(gbnf: string, text: string, r = rng(5)): boolean {
  const m = GrammarMatcher.compile(gbnf);
  const bytes = enc.encode(text);
  let i = 0;
  while (i < bytes.length) {
    const n = 1 + Math.floor(r() * 5);
    const c = bytes.subarray(i, i + n);
    if (!m.accepts(c)) return false;
    m.advance(c);
    i += n;
  }
  return m.canEnd();
}

interface Case {
  name: string;
  schema: S;
  valid: string[];
  invalid: string[];
  /** Extra checks over the generated documents (variety, order). */
  check?: (docs: J[], texts: string[]) => void;
}

const person = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 150 },
    email: { type: "string", format: "email" },
    tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 3 },
  },
  required: ["name", "age"],
};

const CASES: Case[] = [
  {
    name: "object with required and optional properties, bounds, enum items",
    schema: person,
    valid: [`{"name": "Al", "age": 30}`, `{ "name":"Zoë","age":0, "tags": ["a", "c"] }`, `{"name": "x", "age": 150, "email": "q@r", "tags": []}`, `{\n  "name": "B",\n  "age": 7\n}`],
    invalid: [
      `{"age": 30, "name": "Al"}`, // required ones come first, in declared order
      `{"name": "Al"}`,
      `{"name": "", "age": 30}`,
      `{"name": "Al", "age": 151}`,
      `{"name": "Al", "age": -1}`,
      `{"name": "Al", "age": 3.5}`,
      `{"name": "Al", "age": 30, "x": 1}`,
      `{"name": "Al", "age": 30, "tags": ["d"]}`,
      `{"name": "Al", "age": 30, "tags": ["a","a","a","a"]}`,
      `{"name": "Al", "age": 30, "tags": ["a"], "email": "e"}`, // optional ones in declared order
      `{"name": "Al", "age": 30,}`,
      `{"name": "Al" , "age": 30}`,
    ],
    check: (docs) => {
      expect(docs.some((d) => "tags" in (d as object))).toBe(true);
      expect(docs.some((d) => !("email" in (d as object)))).toBe(true);
      for (const d of docs) {
        const keys = Object.keys(d as object);
        expect(keys.slice(0, 2)).toEqual(["name", "age"]);
        const order = ["name", "age", "email", "tags"];
        expect([...keys].sort((a, b) => order.indexOf(a) - order.indexOf(b))).toEqual(keys);
      }
    },
  },
  {
    name: "nested objects with a pattern",
    schema: {
      type: "object",
      properties: {
        address: { type: "object", properties: { street: { type: "string" }, zip: { type: "string", pattern: "^\\d{5}(-\\d{4})?$" } }, required: ["street", "zip"] },
        geo: { type: "object", properties: { lat: { type: "number" }, lon: { type: "number" } }, required: ["lat", "lon"] },
      },
      required: ["address", "geo"],
    },
    valid: [`{"address": {"street": "Main St \\"1\\"", "zip": "12345-6789"}, "geo": {"lat": -12.5, "lon": 1e10}}`],
    invalid: [`{"address": {"street": "x", "zip": "1234"}, "geo": {"lat": 1, "lon": 2}}`, `{"address": {"zip": "12345", "street": "x"}, "geo": {"lat": 1, "lon": 2}}`, `{"address": {"street": "x", "zip": "12345"}, "geo": {"lat": 1}}`],
  },
  {
    name: "array with bounds of bounded integers",
    schema: { type: "array", items: { type: "integer", minimum: -10, maximum: 10 }, minItems: 2, maxItems: 5 },
    valid: [`[1, 2]`, `[-10,10,0,5,-3]`, `[ 0 , 0 ]`.replace(" ,", ",")],
    invalid: [`[1]`, `[]`, `[1,2,3,4,5,6]`, `[11, 0]`, `[-11, 0]`, `[01, 2]`, `[1.0, 2]`, `[-0, 1]`],
    check: (docs) => {
      const lengths = new Set(docs.map((d) => (d as J[]).length));
      expect(lengths.size).toBeGreaterThan(2);
    },
  },
  {
    name: "enum and const",
    schema: { type: "object", properties: { kind: { const: "event" }, level: { enum: ["low", "mid", "high", 3, null, true, { x: [1] }] } }, required: ["kind", "level"] },
    valid: [`{"kind": "event", "level": "mid"}`, `{"kind": "event", "level": null}`, `{"kind": "event", "level": {"x":[1]}}`],
    invalid: [`{"kind": "events", "level": 3}`, `{"kind": "event", "level": 4}`, `{"kind": "event", "level": false}`, `{"kind": "event", "level": "Low"}`],
    check: (docs) => expect(new Set(docs.map((d) => canon((d as { level: J }).level))).size).toBeGreaterThan(3),
  },
  {
    name: "anyOf of different types",
    schema: {
      anyOf: [
        { type: "string", maxLength: 5 },
        { type: "integer" },
        { type: "object", properties: { x: { type: "boolean" } }, required: ["x"] },
        { type: "array", items: { type: "null" } },
      ],
    },
    valid: [`"abc"`, `-42`, `{"x": true}`, `[null, null]`, `[]`],
    invalid: [`"abcdef"`, `1.5`, `{"x": 1}`, `[1]`, `true`],
    check: (docs) => expect(new Set(docs.map(typeOf)).size).toBeGreaterThanOrEqual(3),
  },
  {
    name: "recursive $ref through $defs",
    schema: {
      $defs: { node: { type: "object", properties: { value: { type: "integer" }, children: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } }, required: ["value"] } },
      $ref: "#/$defs/node",
    },
    valid: [`{"value": 1}`, `{"value": 1, "children": [{"value": 2, "children": [{"value": 3}]}, {"value": 4}]}`],
    invalid: [`{"value": 1, "children": [{"value": "x"}]}`, `{"value": 1, "children": [{"value": 1}, {"value": 2}, {"value": 3}]}`, `{"children": []}`],
  },
  {
    name: "definitions with oneOf of disjoint branches",
    schema: {
      definitions: { cat: { type: "object", properties: { meow: { type: "boolean" } }, required: ["meow"] }, dog: { type: "object", properties: { bark: { type: "integer" } }, required: ["bark"] } },
      type: "object",
      properties: { pet: { oneOf: [{ $ref: "#/definitions/cat" }, { $ref: "#/definitions/dog" }] } },
      required: ["pet"],
    },
    valid: [`{"pet": {"meow": false}}`, `{"pet": {"bark": 3}}`],
    invalid: [`{"pet": {"meow": 3}}`, `{"pet": {}}`],
  },
  {
    name: "patterns with characters that JSON must escape",
    schema: {
      type: "object",
      properties: {
        phone: { type: "string", pattern: "^\\+?[0-9]{1,3}-[0-9]{3}-[0-9]{4}$" },
        code: { type: "string", pattern: "^[A-Z]{2}(-[a-z0-9_]+)*$" },
        odd: { type: "string", pattern: '^["\\\\/]{1,3}\\t?[^a-z]$' },
        free: { type: "string", pattern: "ab+c" },
      },
      required: ["phone", "code", "odd", "free"],
    },
    valid: [`{"phone": "+1-555-1234", "code": "AB-x_1-yy", "odd": "\\"\\\\/\\t7", "free": "xxabbbcyy"}`],
    invalid: [
      `{"phone": "1-55-1234", "code": "AB", "odd": "\\"1", "free": "abc"}`,
      `{"phone": "1-555-1234", "code": "ab", "odd": "\\"1", "free": "abc"}`,
      `{"phone": "1-555-1234", "code": "AB", "odd": "\\"a", "free": "abc"}`,
      `{"phone": "1-555-1234", "code": "AB", "odd": "\\"1", "free": "ac"}`,
      `{"phone": "1-555-1234", "code": "AB", "odd": ""1", "free": "abc"}`,
    ],
  },
  {
    name: "string formats",
    schema: {
      type: "object",
      properties: { d: { type: "string", format: "date" }, t: { type: "string", format: "time" }, dt: { type: "string", format: "date-time" }, id: { type: "string", format: "uuid" } },
      required: ["d", "t", "dt", "id"],
    },
    valid: [`{"d": "2024-02-29", "t": "23:59:59Z", "dt": "1999-12-31T00:00:00.123+05:30", "id": "123e4567-e89b-12d3-a456-426614174000"}`],
    invalid: [
      `{"d": "2024-13-01", "t": "23:59:59Z", "dt": "1999-12-31T00:00:00Z", "id": "123e4567-e89b-12d3-a456-426614174000"}`,
      `{"d": "2024-01-01", "t": "24:00:00Z", "dt": "1999-12-31T00:00:00Z", "id": "123e4567-e89b-12d3-a456-426614174000"}`,
      `{"d": "2024-01-01", "t": "12:00:00", "dt": "1999-12-31T00:00:00Z", "id": "123e4567-e89b-12d3-a456-426614174000"}`,
      `{"d": "2024-01-01", "t": "12:00:00Z", "dt": "1999-12-31 00:00:00Z", "id": "123e4567-e89b-12d3-a456-426614174000"}`,
      `{"d": "2024-01-01", "t": "12:00:00Z", "dt": "1999-12-31T00:00:00Z", "id": "123e4567e89b12d3a456426614174000"}`,
    ],
  },
  {
    name: "type arrays",
    schema: { type: "object", properties: { a: { type: ["string", "null"], maxLength: 3 }, b: { type: ["integer", "boolean"] } }, required: ["a", "b"] },
    valid: [`{"a": null, "b": true}`, `{"a": "xyz", "b": -3}`],
    invalid: [`{"a": 1, "b": true}`, `{"a": "wxyz", "b": 1}`, `{"a": null, "b": "1"}`, `{"a": null, "b": 1.5}`],
    check: (docs) => expect(new Set(docs.map((d) => typeOf((d as { a: J }).a))).size).toBe(2),
  },
  {
    name: "tuples: prefixItems alone and with more items",
    schema: {
      type: "object",
      properties: {
        exact: { type: "array", prefixItems: [{ type: "string" }, { type: "integer" }, { type: "boolean" }] },
        more: { type: "array", prefixItems: [{ const: 1 }], items: { type: "null" }, maxItems: 3 },
        legacy: { type: "array", items: [{ type: "integer" }, { type: "integer" }] },
      },
      required: ["exact", "more", "legacy"],
    },
    valid: [`{"exact": ["x", 1, false], "more": [1], "legacy": [1, 2]}`, `{"exact": ["", -0, true], "more": [1, null, null], "legacy": [0, 0]}`],
    invalid: [`{"exact": ["x", 1], "more": [1], "legacy": [1, 2]}`, `{"exact": ["x", 1, false], "more": [1, null, null, null], "legacy": [1, 2]}`, `{"exact": ["x", 1, false], "more": [2], "legacy": [1, 2]}`, `{"exact": ["x", 1, false], "more": [1], "legacy": [1, 2, 3]}`],
  },
  {
    name: "allOf of objects is merged",
    schema: {
      $defs: { base: { type: "object", properties: { id: { type: "integer", minimum: 1 } }, required: ["id"] } },
      allOf: [{ $ref: "#/$defs/base" }, { properties: { label: { type: "string", maxLength: 4 } }, required: ["label"] }, { properties: { extra: { type: "boolean" } } }],
    },
    valid: [`{"id": 5, "label": "ab"}`, `{"id": 1, "label": "", "extra": false}`],
    invalid: [`{"id": 0, "label": "ab"}`, `{"id": 5}`, `{"label": "ab"}`, `{"id": 5, "label": "abcde"}`],
  },
  {
    name: "additionalProperties as a schema, and true next to declared properties",
    schema: {
      type: "object",
      properties: {
        counts: { type: "object", properties: { id: { type: "integer" } }, required: ["id"], additionalProperties: { type: "number" } },
        open: { type: "object", properties: { k: { type: "boolean" } }, additionalProperties: true },
      },
      required: ["counts", "open"],
    },
    valid: [`{"counts": {"id": 1, "x": 1.5, "y": 2}, "open": {"k": true, "other": [1, {"z": null}]}}`, `{"counts": {"id": 1}, "open": {}}`],
    invalid: [`{"counts": {"id": 1, "x": "s"}, "open": {}}`, `{"counts": {"id": 1, "id": 2}, "open": {}}`, `{"counts": {"id": 1}, "open": {"k": true, "k": 1}}`],
    check: (docs, texts) => {
      // extra keys are produced, never under a declared name
      expect(docs.some((d) => Object.keys((d as { counts: object }).counts).length > 1)).toBe(true);
      for (const t of texts) expect((t.match(/"id"/g) ?? []).length).toBe(1);
    },
  },
  {
    name: "string lengths count characters, not bytes",
    schema: { type: "array", items: { type: "string", minLength: 2, maxLength: 3 } },
    valid: [`["日本", "😀😀😀", "ab"]`, `["\\n\\t"]`],
    invalid: [`["a"]`, `["abcd"]`, `["日本語の"]`],
  },
  {
    name: "integer exclusive bounds",
    schema: { type: "integer", exclusiveMinimum: 0, exclusiveMaximum: 100 },
    valid: [`1`, `99`, `50`],
    invalid: [`0`, `100`, `-5`, `1000`],
  },
  {
    name: "an empty schema is any JSON value",
    schema: {},
    valid: [`null`, `[1, "a", {"b": []}]`, `-0.5e-3`],
    invalid: [`nul`, `[1,]`, `{"a" 1}`, `'a'`],
    check: (docs) => expect(new Set(docs.map(typeOf)).size).toBeGreaterThanOrEqual(3),
  },
];

describe("JSON schema to grammar: random documents validate", () => {
  for (const c of CASES) {
    test(c.name, () => {
      const { gbnf } = convertJsonSchema(c.schema);
      const base = GrammarMatcher.compile(gbnf);
      const r = rng(c.name.length * 7919);
      const docs: J[] = [];
      const texts: string[] = [];
      for (let i = 0; i < 40; i++) {
        const bytes = randomDocument(base, { rng: r, softLimit: 250, stopProbability: 0.5 });
        const text = dec.decode(bytes); // must be valid UTF-8
        let doc: J;
        try {
          doc = JSON.parse(text) as J;
        } catch (e) {
          throw new Error(`generated text is not JSON: ${JSON.stringify(text)}\n${gbnf}`);
        }
        const problems = validate(c.schema, doc, c.schema);
        if (problems.length > 0) throw new Error(`generated ${text} fails the schema: ${problems.join("; ")}\n${gbnf}`);
        // the generated text is also accepted when fed in random token-sized chunks
        expect(accepts(gbnf, text, r)).toBe(true);
        docs.push(doc);
        texts.push(text);
      }
      c.check?.(docs, texts);
      for (const v of c.valid) {
        if (!accepts(gbnf, v)) throw new Error(`valid document refused: ${v}\n${gbnf}`);
        expect(validate(c.schema, JSON.parse(v) as J, c.schema)).toEqual([]);
      }
      for (const v of c.invalid) if (accepts(gbnf, v)) throw new Error(`invalid document accepted: ${v}\n${gbnf}`);
    });
  }

  test("JSON_OBJECT_GBNF produces any JSON object and only objects", () => {
    const base = GrammarMatcher.compile(JSON_OBJECT_GBNF);
    const r = rng(11);
    let nonEmpty = 0;
    for (let i = 0; i < 40; i++) {
      const doc = JSON.parse(dec.decode(randomDocument(base, { rng: r, softLimit: 200, stopProbability: 0.5 }))) as J;
      expect(typeOf(doc)).toBe("object");
      if (Object.keys(doc as object).length > 0) nonEmpty++;
    }
    expect(nonEmpty).toBeGreaterThan(10);
    expect(accepts(JSON_OBJECT_GBNF, `{"a": [1, {"b": null}], "c": "d"}`)).toBe(true);
    for (const bad of [`[]`, `"x"`, `{"a": }`, `{a: 1}`, `{"a": 1}}`]) expect(accepts(JSON_OBJECT_GBNF, bad)).toBe(false);
  });

  test("whitespace is bounded: the grammar cannot generate spaces forever", () => {
    const m = GrammarMatcher.compile(jsonSchemaToGbnf({ type: "array", items: { type: "integer" } }));
    m.advanceText("[");
    let n = 0;
    while (m.acceptsText(" ") || m.acceptsText("\t")) {
      m.advanceText(m.acceptsText(" ") ? " " : "\t");
      if (++n > 100) break;
    }
    expect(n).toBeLessThan(60);
    expect(m.acceptsText("\n\n\n")).toBe(false);
  });
});

describe("integer ranges", () => {
  const ranges: [number | null, number | null][] = [
    [0, 150],
    [-123, 4567],
    [-5, null],
    [null, 30],
    [-1000, -7],
    [7, 7],
    [10, null],
    [25, null],
    [null, -5],
    [1, 1_000_000],
    [-99, 99],
    [0, null],
    [1, null],
    [null, 0],
    [-9, 0],
    [100, 999],
    [123_456_789, 123_457_000],
  ];
  for (const [lo, hi] of ranges) {
    test(`[${lo}, ${hi}]`, () => {
      const schema: Record<string, unknown> = { type: "integer" };
      if (lo !== null) schema.minimum = lo;
      if (hi !== null) schema.maximum = hi;
      const gbnf = jsonSchemaToGbnf(schema);
      const values = new Set<number>();
      for (const b of [lo, hi, 0]) if (b !== null) for (let d = -40; d <= 40; d++) values.add(b + d);
      const r = rng(Math.abs((lo ?? 3) * 31 + (hi ?? 7)));
      for (let i = 0; i < 100; i++) values.add(Math.floor((r() - 0.5) * 10 ** (1 + Math.floor(r() * 15))));
      values.add(999_999_999_999_999);
      values.add(-999_999_999_999_999);
      const m = GrammarMatcher.compile(gbnf);
      for (const v of values) {
        const inRange = (lo === null || v >= lo) && (hi === null || v <= hi);
        const text = String(v);
        const c = m.clone();
        const ok = c.acceptsText(text) && (c.advanceText(text), c.canEnd());
        if (ok !== inRange) throw new Error(`${v}: grammar says ${ok}, range [${lo}, ${hi}] says ${inRange}\n${gbnf}`);
      }
      for (const bad of ["-0", "007", "+1", "1.0", "1e3"]) {
        const c = m.clone();
        expect(c.acceptsText(bad) && (c.advanceText(bad), c.canEnd())).toBe(false);
      }
    });
  }

  test("fractional bounds round inwards; an empty range is refused", () => {
    const g = jsonSchemaToGbnf({ type: "integer", minimum: 1.5, maximum: 4.5 });
    expect(["1", "2", "3", "4", "5"].map((s) => accepts(g, s))).toEqual([false, true, true, true, false]);
    expect(() => jsonSchemaToGbnf({ type: "integer", minimum: 5, maximum: 4 })).toThrow(JsonSchemaError);
  });
});

describe("patterns agree with RegExp", () => {
  const patterns: [string, string[]][] = [
    ["^[a-c]+$", ["a", "b", "c", "d"]],
    ["^(ab|c)*d?$", ["a", "b", "c", "d"]],
    ["^a{2,3}b?$", ["a", "b"]],
    ["^\\d+(\\.\\d{1,2})?$", ["1", "2", ".", "x"]],
    ["^[^a-z]{2}$", ["a", "Z", "1", '"', "\\", "\n", "é"]],
    ['^("|\\\\|\\n|\\t)+x$', ['"', "\\", "\n", "\t", "x", "\u0001"]],
    ["^[\\s\\S]?$", [" ", "\t", "a", "\u2028", "\u0000"]],
    ["^.{0,3}$", ["a", "\n", "\r", "é", "\u0007"]],
    ["^\\w\\W$", ["a", "_", "-", " "]],
    ["foo", ["f", "o", "x"]],
    ["^x|y$", ["x", "y", "z"]],
    ["^(?:é|😀){1,2}[^😀]$", ["é", "😀", "a"]],
    ["^[\\x41-\\x43\\u00e9]+$", ["A", "B", "D", "é"]],
    ["^(?<word>[a-z]+)-\\1?$".replace("\\1?", "[0-9]?"), ["a", "-", "1", "A"]],
    ["^a.c$", ["abc", "a", "b", "c", "\n", '"']],
  ];
  for (const [pattern, alphabet] of patterns) {
    test(pattern, () => {
      const re = new RegExp(pattern, "u");
      const gbnf = jsonSchemaToGbnf({ type: "string", pattern });
      const m = GrammarMatcher.compile(gbnf);
      const r = rng(pattern.length);
      let matching = 0;
      const strings = new Set<string>([""]);
      for (let i = 0; i < 400; i++) strings.add(Array.from({ length: Math.floor(r() * 6) }, () => alphabet[Math.floor(r() * alphabet.length)]).join(""));
      for (const s of strings) {
        const expected = re.test(s);
        if (expected) matching++;
        const text = JSON.stringify(s);
        const c = m.clone();
        const got = c.acceptsText(text) && (c.advanceText(text), c.canEnd());
        if (got !== expected) throw new Error(`pattern ${pattern} on ${text}: grammar ${got}, RegExp ${expected}\n${gbnf}`);
      }
      expect(matching).toBeGreaterThan(0);
    });
  }

  const refused: [string, RegExp][] = [
    ["^(?=a)a$", /lookahead/],
    ["^(a)\\1$", /backreferences/],
    ["\\bfoo", /word boundary/],
    ["^\\p{L}+$", /property escapes/],
    ["^a(^b)$", /only supported at the start or end/],
    ["^(a$", /missing '\)'/],
    ["^a)$", /unbalanced/],
    ["^*a$", /quantifier after an anchor/],
    ["^a|*b$", /nothing to repeat/],
    ["^[b-a]$", /out of order/],
    ["^a{5,2}$", /maximum below minimum/],
  ];
  for (const [pattern, message] of refused) {
    test(`refused: ${pattern}`, () => {
      let err: unknown;
      try {
        jsonSchemaToGbnf({ type: "object", properties: { p: { type: "string", pattern } } });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(JsonSchemaError);
      expect((err as JsonSchemaError).message).toMatch(message);
      expect((err as JsonSchemaError).path).toBe("#/properties/p/pattern");
    });
  }
});

describe("schema errors and warnings", () => {
  const bad: [unknown, RegExp][] = [
    [123, /schema must be an object or a boolean/],
    [{ type: 123 }, /type must be a string/],
    [{ type: "hiccup" }, /unknown type "hiccup"/],
    [{ $ref: "https://example.com/schema.json" }, /only references into the same document/],
    [{ $ref: "#/$defs/missing" }, /cannot be resolved/],
    [{ enum: [] }, /enum must be a non-empty array/],
    [{ type: "array", minItems: -1 }, /minItems must be a non-negative integer/],
    [{ type: "array", minItems: 3, maxItems: 2 }, /minItems is above maxItems/],
    [{ allOf: [{ type: "string" }, { type: "integer" }] }, /no value in common/],
    [{ anyOf: "x" }, /anyOf must be a non-empty array/],
    [false, /matches nothing/],
    [{ type: "object", properties: { a: { type: "string", pattern: 5 } } }, /pattern must be a string/],
  ];
  for (const [schema, message] of bad) {
    test(`refused: ${JSON.stringify(schema)}`, () => {
      expect(() => convertJsonSchema(schema)).toThrow(JsonSchemaError);
      expect(() => convertJsonSchema(schema)).toThrow(message);
    });
  }

  test("deeply nested schemas are a JsonSchemaError, not a stack overflow", () => {
    let deep: Record<string, unknown> = { type: "integer" };
    for (let i = 0; i < 5000; i++) deep = { type: "array", items: deep };
    expect(() => convertJsonSchema(deep)).toThrow(/nests deeper/);
    const defs: Record<string, unknown> = {};
    for (let i = 0; i < 5000; i++) defs[`d${i}`] = { $ref: `#/$defs/d${i + 1}` };
    defs.d5000 = { type: "null" };
    expect(() => convertJsonSchema({ $defs: defs, $ref: "#/$defs/d0" })).toThrow(/nests deeper/);
    expect(() => convertJsonSchema({ type: "string", pattern: "a**" })).toThrow(/nothing to repeat/);
  });

  test("unenforced keywords are reported as warnings", () => {
    const { warnings } = convertJsonSchema({ type: "object", properties: { a: { type: "array", uniqueItems: true }, n: { type: "number", minimum: 0 }, e: { type: "string", format: "email" } } });
    expect(warnings.some((w) => w.includes("#/properties/a") && w.includes("uniqueItems"))).toBe(true);
    expect(warnings.some((w) => w.includes("#/properties/n") && w.includes("minimum"))).toBe(true);
    expect(warnings.some((w) => w.includes("email"))).toBe(true);
  });

  test("the llama-server response_format examples convert", () => {
    expect(accepts(jsonSchemaToGbnf({ const: "42" }), `"42"`)).toBe(true);
    expect(accepts(jsonSchemaToGbnf({ items: [{ type: "integer" }] }), `[ -3000 ]`)).toBe(true);
    expect(accepts(jsonSchemaToGbnf({ const: "foooooo" }), `"foooooo"`)).toBe(true);
  });

  test("property names are escaped in rule names and literals", () => {
    const schema = { type: "object", properties: { "a b\"c": { type: "integer" }, "": { type: "null" }, number: { type: "boolean" } }, required: ["a b\"c", "", "number"] };
    const g = jsonSchemaToGbnf(schema);
    expect(accepts(g, `{"a b\\"c": 1, "": null, "number": true}`)).toBe(true);
    expect(accepts(g, `{"a b\\"c": 1, "": null, "number": 1}`)).toBe(false);
  });
});
