// bloomery tests: the grammar a llama-server request asks for (grammar / json_schema / response_format).
import { describe, expect, test } from "bun:test";
import { GrammarMatcher, GrammarRequestError, JsonSchemaError, requestGrammar } from "../src/grammar/index.ts";

function allows(gbnf: string | null, text: string): boolean {
  if (gbnf === null) return true;
  const m = GrammarMatcher.compile(gbnf);
  return m.acceptsText(text) && (m.advanceText(text), m.canEnd());
}

describe("requestGrammar", () => {
  test("no grammar fields: unconstrained", () => {
    expect(requestGrammar({}).gbnf).toBeNull();
    expect(requestGrammar({ response_format: { type: "text" } }).gbnf).toBeNull();
    expect(requestGrammar({ grammar: "" }).gbnf).toBeNull();
  });

  test("a GBNF grammar passes through", () => {
    expect(requestGrammar({ grammar: 'root ::= "a"{5,5}' }).gbnf).toBe('root ::= "a"{5,5}');
  });

  test("json_schema and response_format schemas (the llama-server test cases)", () => {
    expect(allows(requestGrammar({ json_schema: { const: "42" } }).gbnf, `"42"`)).toBe(true);
    expect(allows(requestGrammar({ response_format: { type: "json_object", schema: { const: "42" } } }).gbnf, `"42"`)).toBe(true);
    expect(allows(requestGrammar({ response_format: { type: "json_object", schema: { items: [{ type: "integer" }] } } }).gbnf, `[ -3000 ]`)).toBe(true);
    expect(allows(requestGrammar({ response_format: { type: "json_schema", json_schema: { schema: { const: "foooooo" } } } }).gbnf, `"foooooo"`)).toBe(true);
  });

  test("an absent or empty schema means any object", () => {
    for (const body of [{ response_format: { type: "json_object" } }, { json_schema: {} }, { response_format: { type: "json_schema", json_schema: {} } }]) {
      const { gbnf } = requestGrammar(body);
      expect(allows(gbnf, `{"a": 1}`)).toBe(true);
      expect(allows(gbnf, `[1]`)).toBe(false);
      expect(allows(gbnf, `"John"`)).toBe(false);
    }
  });

  test("json_object keeps a json_schema field when it has no schema of its own", () => {
    const { gbnf } = requestGrammar({ json_schema: { type: "integer" }, response_format: { type: "json_object" } });
    expect(allows(gbnf, "12")).toBe(true);
  });

  test("bad requests are typed errors naming the field", () => {
    expect(() => requestGrammar({ response_format: { type: "sound" } })).toThrow(GrammarRequestError);
    expect(() => requestGrammar({ response_format: { type: "sound" } })).toThrow(/response_format/);
    expect(() => requestGrammar({ response_format: { type: "json_object", schema: 123 } })).toThrow(JsonSchemaError);
    expect(() => requestGrammar({ response_format: { type: "json_object", schema: { type: 123 } } })).toThrow(JsonSchemaError);
    expect(() => requestGrammar({ response_format: { type: "json_object", schema: { type: "hiccup" } } })).toThrow(JsonSchemaError);
    expect(() => requestGrammar({ json_schema: { type: "string" }, grammar: 'root ::= "x"' })).toThrow(/cannot use both/);
    expect(() => requestGrammar({ grammar: 42 })).toThrow(GrammarRequestError);
  });

  test("warnings come back with the grammar", () => {
    expect(requestGrammar({ json_schema: { type: "array", uniqueItems: true } }).warnings.length).toBe(1);
  });
});
