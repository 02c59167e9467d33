// bloomery grammar: which grammar a llama-server request asks for (`grammar`, `json_schema`, `response_format`), as tools/server does.
import { convertJsonSchema } from "./json-schema.ts";
import { isObject } from "./schema-merge.ts";

/** A request's grammar fields are contradictory or malformed; `field` names the offending one. */
export class GrammarRequestError extends Error {
  constructor(
    readonly field: string,
    readonly detail: string,
  ) {
    super(`"${field}": ${detail}`);
    this.name = "GrammarRequestError";
  }
}

export interface GrammarRequestFields {
  readonly grammar?: unknown;
  readonly json_schema?: unknown;
  readonly response_format?: unknown;
}

export interface RequestGrammar {
  /** GBNF text, or null when generation is unconstrained. */
  readonly gbnf: string | null;
  /** Schema keywords the grammar does not enforce. */
  readonly warnings: string[];
}

/**
 * The grammar a request asks for: `response_format` {type: "json_object", schema?} or
 * {type: "json_schema", json_schema: {schema}} or "text"; a `json_schema` field; or a GBNF
 * `grammar`. An absent or empty schema means any JSON object, as llama-server has it. Throws
 * `GrammarRequestError` (both json_schema and grammar, unknown response_format type, a grammar
 * that is not a string) or `JsonSchemaError` (a schema that cannot be converted). The GBNF is
 * not compiled here: `GrammarMatcher.compile` does that (and throws `GrammarError`).
 */
export function requestGrammar(body: GrammarRequestFields): RequestGrammar {
  let schema: unknown = body.json_schema ?? null;
  const grammar = body.grammar ?? "";
  if (typeof grammar !== "string") throw new GrammarRequestError("grammar", "must be a string of GBNF");
  if (schema !== null && grammar !== "") throw new GrammarRequestError("json_schema", "cannot use both json_schema and grammar");
  const rf = body.response_format;
  if (rf !== undefined && rf !== null) {
    if (!isObject(rf)) throw new GrammarRequestError("response_format", "must be an object");
    const type = rf.type ?? "";
    if (type === "json_object") {
      if (rf.schema !== undefined || schema === null) schema = rf.schema ?? {};
    } else if (type === "json_schema") {
      const wrapper = rf.json_schema ?? {};
      if (!isObject(wrapper)) throw new GrammarRequestError("response_format", "json_schema must be an object");
      schema = wrapper.schema ?? {};
    } else if (type !== "" && type !== "text") {
      throw new GrammarRequestError("response_format", `type must be one of "text", "json_object" or "json_schema", but got: ${JSON.stringify(type)}`);
    }
  }
  if (schema !== null) {
    if (isObject(schema) && Object.keys(schema).length === 0) schema = { type: "object" };
    const { gbnf, warnings } = convertJsonSchema(schema);
    return { gbnf, warnings };
  }
  return { gbnf: grammar === "" ? null : grammar, warnings: [] };
}
