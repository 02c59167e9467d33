// bloomery grammar: typed errors of the structured-output layer (GBNF parse, matching, JSON schema conversion).

/**
 * A GBNF grammar is malformed or cannot be used: a syntax error, an undefined rule, no `root`,
 * left recursion, a rule that can never finish. `line`/`column` (1-based, column counted in
 * characters) point at the offending place when there is one.
 */
export class GrammarError extends Error {
  constructor(
    readonly detail: string,
    readonly line?: number,
    readonly column?: number,
  ) {
    super(line !== undefined ? `grammar error at line ${line}, column ${column}: ${detail}` : `grammar error: ${detail}`);
    this.name = "GrammarError";
  }
}

/** `GrammarMatcher.advance` was given bytes the grammar does not allow at this point. */
export class GrammarMatchError extends Error {
  constructor(readonly detail: string) {
    super(`grammar rejects input: ${detail}`);
    this.name = "GrammarMatchError";
  }
}

/**
 * A JSON schema cannot be converted to a grammar: it is malformed (`path` is the JSON pointer of
 * the offending subschema, e.g. `#/properties/age`) or asks for something the converter refuses
 * (an unsupported regex construct, a remote $ref, contradictory allOf parts).
 */
export class JsonSchemaError extends Error {
  constructor(
    readonly path: string,
    readonly detail: string,
  ) {
    super(`JSON schema error at ${path}: ${detail}`);
    this.name = "JsonSchemaError";
  }
}
