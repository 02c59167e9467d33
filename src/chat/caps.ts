// bloomery chat: what a chat template can take (system role, tool calls, object arguments,
// string or typed content ...), found by rendering probe conversations as llama.cpp's
// common/jinja/caps.cpp does, tracking which message fields the template reads.
import { type Program, TrackingMap, type TrackedMaps, runTemplate, toRuntime } from "./jinja-env.ts";

/** llama's `jinja::caps` (reported in /props as `chat_template_caps`). */
export interface TemplateCaps {
  supports_string_content: boolean;
  supports_typed_content: boolean;
  supports_tools: boolean;
  supports_tool_calls: boolean;
  supports_system_role: boolean;
  supports_parallel_tool_calls: boolean;
  supports_preserve_reasoning: boolean;
  supports_reasoning_effort: boolean;
  supports_object_arguments: boolean;
}

interface ProbeResult {
  ok: boolean;
  output: string;
  maps: TrackedMaps;
  globals: TrackingMap;
}

function runProbe(program: Program, messages: object[], tools: object[], extra: Record<string, unknown> = {}): ProbeResult {
  const maps: TrackedMaps = new WeakMap();
  const globals = new TrackingMap();
  const vars = new Map<string, ReturnType<typeof toRuntime>>();
  const ctx: Record<string, unknown> = {
    messages,
    tools,
    bos_token: "",
    eos_token: "",
    add_generation_prompt: true,
    ...extra,
  };
  for (const [k, v] of Object.entries(ctx)) vars.set(k, toRuntime(v, k === "messages" || k === "tools" ? maps : undefined));
  try {
    const output = runTemplate(program, { now: new Date(), vars, trackGlobals: globals });
    return { ok: true, output, maps, globals };
  } catch {
    return { ok: false, output: "", maps, globals };
  }
}

function used(maps: TrackedMaps, obj: object, key: string): boolean {
  return maps.get(obj)?.used.has(key) ?? false;
}

const PROBE_TOOL = {
  name: "tool",
  type: "function",
  function: {
    name: "tool1",
    description: "Tool description",
    parameters: {
      type: "object",
      properties: { arg: { type: "string", description: "Arg description" } },
      required: ["arg"],
    },
  },
};

function toolConversation(args: unknown, calls: number) {
  const toolCalls = Array.from({ length: calls }, (_, i) => ({
    id: `call0000${i + 1}`,
    type: "function",
    function: { name: "tool1", arguments: args },
  }));
  const assistant = { role: "assistant", content: "", tool_calls: toolCalls };
  const messages = [
    { role: "user", content: "User message" },
    assistant,
    { role: "tool", content: "Tool response", tool_call_id: "call00001" },
    { role: "assistant", content: "The tool response was 'tool response'" },
    { role: "user", content: "User message" },
  ];
  return { messages, assistant, toolCalls };
}

/** Probes a compiled template for its capabilities. Never throws (a failing probe is a "no"). */
export function probeCaps(program: Program): TemplateCaps {
  const caps: TemplateCaps = {
    supports_string_content: true,
    supports_typed_content: false,
    supports_tools: true,
    supports_tool_calls: true,
    supports_system_role: true,
    supports_parallel_tool_calls: true,
    supports_preserve_reasoning: false,
    supports_reasoning_effort: false,
    supports_object_arguments: false,
  };

  // Content: a string, and one text part. Typed content counts only when the part's text is
  // rendered as text (a template that just concatenates the array prints it as JSON).
  const stringMarker = "STRING_MARKER";
  const typedMarker = "TYPED_MARKER";
  const s = runProbe(program, [{ role: "user", content: stringMarker }], []);
  const t = runProbe(program, [{ role: "user", content: [{ type: "text", text: typedMarker }] }], []);
  caps.supports_typed_content =
    t.ok && t.output.includes(typedMarker) && !t.output.includes(`"${typedMarker}"`) && !t.output.includes(`'${typedMarker}'`);
  caps.supports_string_content = s.ok && (s.output.includes(stringMarker) || !caps.supports_typed_content);

  // System role: does the template read the system message's content at all?
  const system = { role: "system", content: "System message" };
  const sys = runProbe(program, [system, { role: "user", content: "User message" }], []);
  if (!used(sys.maps, system, "content")) caps.supports_system_role = false;

  // Tools and tool calls, first with object arguments, then with string arguments.
  const objArgs = { arg: "value" };
  const one = toolConversation(objArgs, 1);
  const tool = structuredClone(PROBE_TOOL);
  const r1 = runProbe(program, one.messages, [tool]);
  let decided = false;
  if (r1.ok) {
    decided = true;
    if (!used(r1.maps, tool.function, "name")) caps.supports_tools = false;
    if (!used(r1.maps, one.assistant, "tool_calls")) caps.supports_tool_calls = false;
    else if (used(r1.maps, objArgs, "arg")) caps.supports_object_arguments = true;
  }
  if (!caps.supports_object_arguments) {
    const strOne = toolConversation('{"arg": "value"}', 1);
    const tool2 = structuredClone(PROBE_TOOL);
    const r2 = runProbe(program, strOne.messages, [tool2]);
    if (!r2.ok) {
      caps.supports_tool_calls = false;
      caps.supports_tools = false;
    } else {
      caps.supports_tools = used(r2.maps, tool2.function, "name");
      caps.supports_tool_calls = used(r2.maps, strOne.assistant, "tool_calls");
    }
  } else if (!decided) {
    caps.supports_tool_calls = false;
  }

  // Parallel calls: does the template read the second call?
  const two = toolConversation(caps.supports_object_arguments ? { arg: "value" } : '{"arg": "value"}', 2);
  const r3 = runProbe(program, two.messages, [structuredClone(PROBE_TOOL)]);
  if (!r3.ok || !used(r3.maps, two.toolCalls[1], "function")) caps.supports_parallel_tool_calls = false;

  // Reasoning kept deeper in history than the last assistant turn.
  const placeholder = "<REASONING_CONTENT_PLACEHOLDER>";
  const pr = runProbe(
    program,
    [
      { role: "user", content: "User message" },
      { role: "assistant", content: "Assistant message", reasoning_content: placeholder },
      { role: "user", content: "User message" },
      { role: "assistant", content: "Assistant message", reasoning_content: "Reasoning content" },
      { role: "user", content: "User message" },
    ],
    [],
    { enable_thinking: true, ...preserveReasoningVars(true) },
  );
  caps.supports_preserve_reasoning = pr.output.includes(placeholder);

  // Reasoning effort: does the template read `reasoning_effort`?
  const re = runProbe(program, [{ role: "user", content: "User message" }], [], {
    enable_thinking: true,
    ...reasoningEffortVars("low"),
  });
  caps.supports_reasoning_effort = re.globals.used.has("reasoning_effort");
  return caps;
}

/** The variables llama sets for `preserve_reasoning` (the names different templates read). */
export function preserveReasoningVars(enabled: boolean): Record<string, boolean> {
  return {
    preserve_thinking: enabled,
    clear_thinking: !enabled,
    truncate_history_thinking: !enabled,
    drop_thinking: !enabled,
  };
}

/** The variables llama sets for `reasoning_effort`. */
export function reasoningEffortVars(effort: string): Record<string, string> {
  return { reasoning_effort: effort, reasoning_strength: effort };
}
