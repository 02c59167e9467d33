// bloomery web UI (browser): the dialogs - settings (API key, system message, theme, reasoning
// shown or folded, sampling fields with the server's defaults as placeholders, a custom JSON
// object for the request) and the served model's properties (GET props).
import { h, replace, bytes } from "./dom.ts";
import { checkCustom, checkField, SAMPLING_FIELDS, saveSettings, settings, type Settings, type Theme } from "./settings.ts";

/** What GET props answers (the fields this page reads). */
export interface ServerProps {
  model_alias: string;
  model_path: string;
  model_ftype?: string;
  total_slots: number;
  backend?: string;
  build_info: string;
  chat_template?: string;
  chat_template_caps?: Record<string, boolean>;
  default_generation_settings: { n_ctx: number; params: Record<string, unknown> };
}

function modal(title: string, body: HTMLElement, buttons: HTMLElement[], testid: string): HTMLDialogElement {
  const dlg = h("dialog", { class: "modal", "data-testid": testid },
    h("form", { method: "dialog", class: "modal-box" },
      h("h2", {}, title),
      body,
      h("div", { class: "modal-actions" }, ...buttons)));
  dlg.addEventListener("close", () => dlg.remove());
  document.body.append(dlg);
  dlg.showModal();
  return dlg;
}

/** The settings dialog; onSaved runs after a valid save. */
export function openSettings(props: ServerProps | undefined, onSaved: (s: Settings) => void): void {
  const s = settings();
  const defaults = props?.default_generation_settings.params ?? {};
  const key = h("input", { type: "password", name: "apiKey", value: s.apiKey, autocomplete: "off", placeholder: "none" });
  const system = h("textarea", { name: "system", rows: 3, placeholder: "none" }, s.system);
  const theme = h("select", { name: "theme" }, ...(["system", "light", "dark"] as Theme[]).map((t) => h("option", { value: t, selected: t === s.theme }, t)));
  const reasoning = h("input", { type: "checkbox", name: "showReasoning", checked: s.showReasoning });
  const fields = SAMPLING_FIELDS.map((f) => {
    const def = defaults[f.key === "max_tokens" ? "n_predict" : f.key];
    const input = h("input", { name: f.key, value: s.params[f.key] ?? "", inputmode: "decimal", placeholder: def === undefined ? "server default" : String(def) });
    return { f, input };
  });
  const custom = h("textarea", { name: "custom", rows: 4, placeholder: '{"tools": [...], "tool_choice": "auto"}' }, s.custom);
  const problems = h("p", { class: "problems", role: "alert" });
  const save = h("button", { value: "save", class: "primary", "data-testid": "settings-save" }, "Save");
  const body = h("div", { class: "settings" },
    h("label", {}, "API key ", key, h("small", {}, "sent as Authorization: Bearer; kept in this browser")),
    h("label", {}, "System message", system),
    h("div", { class: "row" }, h("label", {}, "Theme ", theme), h("label", { class: "check" }, reasoning, " show reasoning unfolded")),
    h("fieldset", {}, h("legend", {}, "Sampling (empty: the server's default)"),
      h("div", { class: "grid" }, ...fields.map(({ f, input }) => h("label", { title: f.help }, f.label, input)))),
    h("label", {}, "Custom JSON merged into each request (tools, tool_choice, any llama-server field)", custom),
    problems);
  const dlg = modal("Settings", body, [h("button", { value: "cancel" }, "Cancel"), save], "settings");
  save.addEventListener("click", (ev) => {
    const errs = fields.map(({ f, input }) => checkField(f, input.value)).filter((e) => e !== "");
    const c = checkCustom(custom.value);
    if (c) errs.push(c);
    if (errs.length) {
      ev.preventDefault();
      replace(problems, errs.join("; "));
      return;
    }
    const next: Settings = {
      apiKey: key.value.trim(), system: system.value, theme: theme.value as Theme, showReasoning: reasoning.checked,
      params: Object.fromEntries(fields.map(({ f, input }) => [f.key, input.value.trim()]).filter(([, v]) => v !== "")), custom: custom.value,
    };
    saveSettings(next);
    onSaved(next);
    dlg.close();
  });
}

/** The served model's properties. */
export function openModelInfo(p: ServerProps, sizeBytes?: number): void {
  const rows: [string, string][] = [
    ["model", p.model_alias],
    ["file", p.model_path],
    ["type", p.model_ftype ?? ""],
    ["backend", p.backend ?? ""],
    ["context per slot", `${p.default_generation_settings.n_ctx} tokens`],
    ["slots", String(p.total_slots)],
    ["build", p.build_info],
  ];
  if (sizeBytes !== undefined) rows.push(["size", bytes(sizeBytes)]);
  const caps = Object.entries(p.chat_template_caps ?? {}).filter(([, v]) => v).map(([k]) => k.replace(/^supports_/, ""));
  rows.push(["template supports", caps.join(", ") || "plain text"]);
  const params = p.default_generation_settings.params;
  const shown = ["temperature", "top_k", "top_p", "min_p", "repeat_penalty", "n_predict", "samplers", "reasoning_format"];
  const body = h("div", {},
    h("table", { class: "kv" }, ...rows.map(([k, v]) => h("tr", {}, h("th", {}, k), h("td", {}, v)))),
    h("h3", {}, "Default sampling"),
    h("table", { class: "kv" }, ...shown.filter((k) => k in params).map((k) => h("tr", {}, h("th", {}, k), h("td", {}, JSON.stringify(params[k]))))));
  modal("Model", body, [h("button", { value: "close", class: "primary" }, "Close")], "model-info");
}
