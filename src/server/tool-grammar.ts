// bloomery server: the GBNF grammar that forces a tool call (tool_choice required or named):
// the call body from toolCallSchema (JSON) or the tool's parameters (Qwen3 XML, GLM's arg_key /
// arg_value, DeepSeek V3.1's name + arguments JSON), wrapped in the
// family's tool-call tags; optionally one think block first, several calls when parallel.
import { type ThinkingTags, type ToolCallWrapping, type ToolPolicy, toolCallSchema, toolParameters } from "../chat/index.ts";
import type { JsonSchema } from "../chat/index.ts";
import { convertJsonSchema, GrammarError } from "../grammar/index.ts";

const NAME_CHAR = /[A-Za-z0-9_-]/;

/** Renames every rule of a GBNF text (one rule per line, as the JSON schema converter writes it) with a prefix. */
export function prefixRules(gbnf: string, prefix: string): string {
  const out: string[] = [];
  for (const line of gbnf.split("\n")) {
    if (line.trim() === "") continue;
    const at = line.indexOf("::=");
    if (at < 0) throw new GrammarError(`cannot rename rules of line ${JSON.stringify(line)}`);
    const head = line.slice(0, at).trim();
    out.push(`${prefix}${head} ::= ${renameRefs(line.slice(at + 3), prefix)}`);
  }
  return out.join("\n");
}

function renameRefs(body: string, prefix: string): string {
  let out = "";
  let i = 0;
  while (i < body.length) {
    const c = body[i];
    if (c === '"' || c === "[") {
      const close = c === '"' ? '"' : "]";
      let j = i + 1;
      while (j < body.length && body[j] !== close) j += body[j] === "\\" ? 2 : 1;
      out += body.slice(i, j + 1);
      i = j + 1;
    } else if (c === "{") {
      const j = body.indexOf("}", i);
      out += body.slice(i, j < 0 ? body.length : j + 1);
      i = j < 0 ? body.length : j + 1;
    } else if (NAME_CHAR.test(c)) {
      let j = i;
      while (j < body.length && NAME_CHAR.test(body[j])) j++;
      out += prefix + body.slice(i, j);
      i = j;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

function lit(s: string): string {
  return JSON.stringify(s);
}

/** Text that never contains "</" (raw XML parameter values, thoughts). */
const FREE_TEXT = `xml-char*`;

function isStringSchema(s: JsonSchema): boolean {
  return s.type === "string" || (Array.isArray(s.type) && s.type.length === 1 && s.type[0] === "string");
}

/** The raw values a string enum / const allows (XML parameters are written unquoted). */
function stringChoices(s: JsonSchema): string[] | null {
  if (typeof s.const === "string") return [s.const];
  if (Array.isArray(s.enum) && s.enum.length > 0 && s.enum.every((v) => typeof v === "string")) return s.enum as string[];
  return null;
}

/** Rules for one tool's call in Qwen3's XML form; `p` prefixes its rule names. */
function xmlCallRules(name: string, params: JsonSchema, p: string): string[] {
  const rules: string[] = [];
  const props = (params.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set(params.required ?? []);
  const parts: string[] = [];
  Object.entries(props).forEach(([key, schema], j) => {
    let value: string;
    const choices = stringChoices(schema);
    if (choices) value = `( ${choices.map(lit).join(" | ")} )`;
    else if (isStringSchema(schema)) {
      const max = schema.maxLength;
      value = typeof max === "number" && Number.isInteger(max) && max >= 0 ? `[^<]{0,${max}}` : "xml-text";
    } else {
      const conv = convertJsonSchema(schema);
      const vp = `${p}v${j}-`;
      rules.push(prefixRules(conv.gbnf, vp));
      value = `${vp}root`;
    }
    const one = `${lit(`<parameter=${key}>\n`)} ${value} ${lit("\n</parameter>\n")}`;
    parts.push(required.has(key) ? one : `( ${one} )?`);
  });
  rules.push(`${p}call ::= ${lit(`<function=${name}>\n`)} ${parts.join(" ")} ${lit("</function>\n")}`);
  return rules;
}

/** Rules for one tool's call in GLM's form (`NAME<arg_key>K</arg_key><arg_value>V</arg_value>...`). */
function glmCallRules(name: string, params: JsonSchema, p: string): string[] {
  const rules: string[] = [];
  const props = (params.properties ?? {}) as Record<string, JsonSchema>;
  const required = new Set(params.required ?? []);
  const parts: string[] = [];
  Object.entries(props).forEach(([key, schema], j) => {
    let value: string;
    const choices = stringChoices(schema);
    if (choices) value = `( ${choices.map(lit).join(" | ")} )`;
    else if (isStringSchema(schema)) value = "xml-text";
    else {
      const vp = `${p}v${j}-`;
      rules.push(prefixRules(convertJsonSchema(schema).gbnf, vp));
      value = `${vp}root`;
    }
    const one = `${lit(`<arg_key>${key}</arg_key>`)} glm-nl ${lit("<arg_value>")} ${value} ${lit("</arg_value>")} glm-nl`;
    parts.push(required.has(key) ? one : `( ${one} )?`);
  });
  // GLM-4.5 / 4.6 put a newline after the name and between the tags; GLM-4.7 none
  rules.push(`${p}call ::= ${lit(name)} glm-nl ${parts.join(" ")}`);
  return rules;
}

/** Rules for one tool's call in DeepSeek V3.1's form (`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>`). */
function deepseekCallRules(name: string, params: JsonSchema, p: string): string[] {
  return [
    prefixRules(convertJsonSchema(params).gbnf, `${p}a-`),
    `${p}call ::= ${lit(`<｜tool▁call▁begin｜>${name}<｜tool▁sep｜>`)} ${p}a-root ${lit("<｜tool▁call▁end｜>")}`,
  ];
}

export interface ToolGrammarOptions {
  wrapping: ToolCallWrapping;
  parallel: boolean;
  /** the format's think tags when the model may think first */
  thinking: ThinkingTags | null;
  /** the prompt left a think block open: the output starts inside it and must close it */
  startsInsideThinking: boolean;
}

/** GBNF forcing one (or, when parallel, several) calls of the policy's callable tools. */
export function toolCallGrammar(policy: ToolPolicy, o: ToolGrammarOptions): string {
  const rules: string[] = [];
  const w = o.wrapping;
  let body: string;
  if (w.body === "json") {
    const schema = toolCallSchema(policy);
    if (!schema) throw new GrammarError("no tool can be called");
    rules.push(prefixRules(convertJsonSchema(schema).gbnf, "tc-"));
    body = "tc-root";
  } else {
    const alts: string[] = [];
    const callRules = w.body === "glm" ? glmCallRules : w.body === "deepseek" ? deepseekCallRules : xmlCallRules;
    policy.callable.forEach((t, i) => {
      rules.push(...callRules(t.function.name, toolParameters(t), `tx${i}-`));
      alts.push(`tx${i}-call`);
    });
    // DeepSeek writes all of a turn's calls inside one block
    body = `( ${alts.join(" | ")} )${w.body === "deepseek" && o.parallel ? "+" : ""}`;
  }
  rules.push(`call ::= ${lit(w.open)} ${body} ${lit(w.close)}`);
  rules.push(`xml-text ::= ${FREE_TEXT}`);
  if (w.body === "glm") rules.push(`glm-nl ::= "\\n"?`);
  rules.push(`xml-char ::= [^<] | "<" [^/]`);
  let think = "";
  if (o.thinking) {
    const t = `${FREE_TEXT} ${lit(o.thinking.end)} [ \\t\\n]*`;
    rules.push(o.startsInsideThinking ? `think ::= ${t}` : `think ::= ( ${lit(o.thinking.start)} ${t} )?`);
    think = "think ";
  }
  rules.push(`root ::= ${think}call${o.parallel && w.body !== "deepseek" ? ` ( "\\n" call )*` : ""}`);
  return rules.join("\n") + "\n";
}
