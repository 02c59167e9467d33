// bloomery grammar: public API of structured output (GBNF grammars, the matcher the sampler drives, JSON schema conversion).
export { GrammarError, GrammarMatchError, JsonSchemaError } from "./errors.ts";
export { parseGbnf, type ParsedGrammar, type GrammarRule, type GrammarElement } from "./parse.ts";
export { CompiledGrammar, GrammarMatcher, compileGrammar, filterCandidates, type Candidate, type FilterOptions, type CompiledGrammarOptions } from "./match.ts";
export { JSON_OBJECT_GBNF, convertJsonSchema, jsonSchemaToGbnf, type JsonSchemaConversion } from "./json-schema.ts";
export { allowedBytes, randomDocument, shortestCompletion, type RandomDocumentOptions } from "./sample.ts";
export { GrammarRequestError, requestGrammar, type GrammarRequestFields, type RequestGrammar } from "./request.ts";
