// bloomery server: the GBNF grammars of gpt-oss's harmony format: a forced tool call (tool_choice
// required or named) and a structured reply (response_format / json_schema), each after any
// number of analysis (and, before a call, commentary) messages, as llama.cpp's gpt-oss handler
// builds them. The grammar starts where the prompt left off, after `<|start|>assistant`.
import { type ToolPolicy, toolParameters } from "../chat/index.ts";
import { convertJsonSchema, GrammarError } from "../grammar/index.ts";
import { prefixRules } from "./tool-grammar.ts";

/** Where the output starts. */
export type HarmonyGrammarStart =
  /** after `<|start|>assistant` (the generation prompt) */
  | "header"
  /** inside an analysis message (a continued reasoning_content) */
  | "analysis"
  /** after a forced `<|end|>` (the reasoning budget ran out): the next message opens */
  | "after-end";

function lit(s: string): string {
  return JSON.stringify(s);
}

const NEXT = lit("<|end|><|start|>assistant");

/** Shared rules: message text (never `<|`), the constraint, the channels a call may use. */
function common(): string[] {
  return [
    `h-text ::= ( [^<] | "<" [^|] )*`,
    // a bare type needs its space ("commentary json"), else it runs into the channel or the name
    `h-constraint ::= ( " " "<|constrain|>"? "json" | "<|constrain|>json" )?`,
    `h-call-channel ::= "commentary" | "analysis"`,
  ];
}

/** The root rule: the messages allowed before `last`, from where the output starts. */
function root(messages: string, last: string, start: HarmonyGrammarStart): string {
  const loop = `( ${messages} ${NEXT} )*`;
  if (start === "analysis") return `root ::= h-text ${NEXT} ${loop} ${last}`;
  if (start === "after-end") return `root ::= ${lit("<|start|>assistant")} ${loop} ${last}`;
  return `root ::= ${loop} ${last}`;
}

/**
 * GBNF forcing one call of the policy's callable tools in harmony form: the recipient in the role
 * (` to=functions.NAME<|channel|>commentary json<|message|>ARGS`, as the template renders calls)
 * or in the channel (`<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS`).
 * One call: `<|call|>` ends the turn.
 */
export function harmonyToolGrammar(policy: ToolPolicy, start: HarmonyGrammarStart = "header"): string {
  if (policy.callable.length === 0) throw new GrammarError("no tool can be called");
  const rules = common();
  const alts: string[] = [];
  policy.callable.forEach((t, i) => {
    const p = `tc${i}-`;
    rules.push(prefixRules(convertJsonSchema(toolParameters(t)).gbnf, p));
    const to = lit(` to=functions.${t.function.name}`);
    rules.push(`${p}call ::= ( ${to} "<|channel|>" h-call-channel | "<|channel|>" h-call-channel ${to} ) h-constraint "<|message|>" ${p}root`);
    alts.push(`${p}call`);
  });
  rules.push(`h-msg ::= "<|channel|>" ( "analysis" | "commentary" ) "<|message|>" h-text`);
  rules.push(`h-call ::= ${alts.join(" | ")}`);
  rules.push(root("h-msg", "h-call", start));
  return rules.join("\n") + "\n";
}

/**
 * Wraps a response-format grammar (GBNF from the JSON schema converter) so the JSON is the final
 * message: `<|channel|>final[ <|constrain|>json]<|message|>JSON`, after any analysis messages.
 */
export function harmonyResponseGrammar(schemaGbnf: string, start: HarmonyGrammarStart = "header"): string {
  const rules = common();
  rules.push(prefixRules(schemaGbnf, "rf-"));
  rules.push(`h-msg ::= "<|channel|>analysis<|message|>" h-text`);
  rules.push(`h-final ::= "<|channel|>final" h-constraint "<|message|>" rf-root`);
  rules.push(root("h-msg", "h-final", start));
  return rules.join("\n") + "\n";
}

/** The grammars of a gpt-oss chat request: for the whole output, and after a forced `<|end|>`. */
export interface HarmonyGrammars {
  grammar?: string;
  /** for the reasoning budget: what follows the analysis it cut short */
  after?: string;
}

/**
 * A gpt-oss request's grammar: a forced call (tool_choice required / named), a JSON schema
 * (response_format, json_schema) as the final message, or a client's own GBNF unchanged (it
 * constrains the raw output from its first character, as in llama-server).
 * @param schemaGbnf the request's grammar when it came from a JSON schema, else undefined
 * @param rawGbnf the request's `grammar` field
 */
export function harmonyGrammars(policy: ToolPolicy, schemaGbnf: string | undefined, rawGbnf: string | undefined, startsInsideAnalysis: boolean): HarmonyGrammars {
  const start: HarmonyGrammarStart = startsInsideAnalysis ? "analysis" : "header";
  if (rawGbnf !== undefined) return { grammar: rawGbnf };
  if (schemaGbnf !== undefined) return { grammar: harmonyResponseGrammar(schemaGbnf, start), after: harmonyResponseGrammar(schemaGbnf, "after-end") };
  if (policy.forced) return { grammar: harmonyToolGrammar(policy, start), after: harmonyToolGrammar(policy, "after-end") };
  return {};
}
