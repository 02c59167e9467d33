// bloomery chat: typed errors of the chat layer (template parse/render failures, bad chat input).

/** Why a template could not produce a prompt. */
export type TemplateErrorKind = "parse" | "raise" | "render";

/**
 * A chat template failed: it does not parse (`parse`), it called `raise_exception(...)`
 * (`raise`, the message is the template's own), or rendering hit an error (`render`).
 */
export class TemplateError extends Error {
  constructor(
    readonly kind: TemplateErrorKind,
    readonly detail: string,
  ) {
    super(
      kind === "parse"
        ? `chat template does not parse: ${detail}`
        : kind === "raise"
          ? `chat template raised an exception: ${detail}`
          : `chat template failed to render: ${detail}`,
    );
    this.name = "TemplateError";
  }
}

/**
 * The chat request itself is wrong (a message without a role, content of a bad type, a tool
 * call without a name, unparseable tool-call arguments, a bad tool_choice ...). `field` names
 * the offending part of the request, e.g. `messages[2].content`.
 */
export class ChatInputError extends Error {
  constructor(
    readonly field: string,
    readonly detail: string,
  ) {
    super(`${field}: ${detail}`);
    this.name = "ChatInputError";
  }
}
