// bloomery web UI (browser): the chat view - conversations in a sidebar (kept in IndexedDB, with
// export and import as JSON), the messages with reasoning folded apart, tool calls shown, timings
// and the context in use, and a composer that sends, stops, attaches text files; every message can
// be copied, a user message edited and sent again, an answer edited or regenerated.
import { h, replace, newId, type Child } from "./dom.ts";
import { renderMarkdown } from "./markdown.ts";
import { apiMessages, streamChat, type StreamState } from "./chat-stream.ts";
import { openModelInfo, openSettings, type ServerProps } from "./dialogs.ts";
import { requestFields, settings } from "./settings.ts";
import {
  currentId, deleteConversation, getConversation, listConversations, putConversation, setCurrentId, titleOf,
  type Attachment, type ChatMessage, type Conversation,
} from "./store.ts";

/** Largest text file attached (characters). */
const MAX_ATTACHMENT = 512 * 1024;
/** Saves of a streaming answer at most this often (so a reload keeps most of it). */
const SAVE_EVERY_MS = 1000;

export class ChatView {
  readonly el: HTMLElement;
  private readonly list = h("ul", { class: "conversations", "data-testid": "conversations" });
  private readonly messagesEl = h("div", { class: "messages", "data-testid": "messages" });
  private readonly title = h("span", { class: "chat-title" }, "New chat");
  private readonly ctxEl = h("span", { class: "ctx", "data-testid": "context", title: "tokens in the context of the last answer / a slot's context" });
  private readonly input = h("textarea", { rows: 3, placeholder: "Message (Enter sends, Shift+Enter for a new line)", "data-testid": "input" });
  private readonly sendBtn = h("button", { type: "submit", class: "primary", "data-testid": "send" }, "Send");
  private readonly chips = h("div", { class: "chips" });
  private readonly errorEl = h("p", { class: "problems", role: "alert", "data-testid": "chat-error" });
  private conv: Conversation | undefined;
  private running: { ctl: AbortController; msg: ChatMessage } | undefined;
  private pending: Attachment[] = [];
  private frame = 0;
  private lastSave = 0;
  private armedDelete: string | undefined;

  constructor(private readonly props: () => ServerProps | undefined) {
    const file = h("input", { type: "file", multiple: true, hidden: true, "data-testid": "attach-input" });
    file.addEventListener("change", () => void this.attach(file));
    const importer = h("input", { type: "file", accept: "application/json,.json", hidden: true });
    importer.addEventListener("change", () => void this.importJson(importer));
    this.input.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
        ev.preventDefault();
        void this.sendOrStop();
      }
    });
    const composer = h("form", { class: "composer", on: { submit: (ev) => { ev.preventDefault(); void this.sendOrStop(); } } },
      this.chips,
      h("div", { class: "composer-row" },
        this.input,
        h("div", { class: "composer-buttons" },
          h("button", { type: "button", title: "attach text files", on: { click: () => file.click() } }, "Attach"), file,
          this.sendBtn)),
      this.errorEl);
    this.el = h("div", { class: "chat" },
      h("aside", { class: "sidebar" },
        h("button", { class: "primary wide", "data-testid": "new-chat", on: { click: () => this.newChat() } }, "New chat"),
        this.list,
        h("div", { class: "sidebar-foot" },
          h("button", { on: { click: () => void this.exportJson() }, title: "download every conversation as JSON" }, "Export"),
          h("button", { on: { click: () => importer.click() }, title: "add conversations from an exported file" }, "Import"), importer)),
      h("section", { class: "chat-main" },
        h("div", { class: "chat-head" }, this.title, this.ctxEl,
          h("button", { "data-testid": "model-button", on: { click: () => { const p = this.props(); if (p) openModelInfo(p); } } }, "Model"),
          h("button", { "data-testid": "settings-button", on: { click: () => openSettings(this.props(), () => this.render()) } }, "Settings")),
        this.messagesEl,
        composer));
  }

  /** Lists the stored conversations and reopens the last one. */
  async start(): Promise<void> {
    await this.renderList();
    const id = currentId();
    const c = id ? await getConversation(id) : undefined;
    if (c) this.conv = c;
    this.render();
  }

  private newChat(): void {
    if (this.running) return;
    this.conv = undefined;
    setCurrentId(undefined);
    this.pending = [];
    this.render();
    void this.renderList();
    this.input.focus();
  }

  private async open(id: string): Promise<void> {
    if (this.running) return;
    const c = await getConversation(id);
    if (!c) return;
    this.conv = c;
    setCurrentId(id);
    this.render();
    void this.renderList();
  }

  private async renderList(): Promise<void> {
    const all = await listConversations();
    replace(this.list, ...all.map((c) => {
      const del = h("button", { class: "icon", title: "delete this conversation", "data-testid": "delete-chat" }, this.armedDelete === c.id ? "delete?" : "×");
      del.addEventListener("click", (ev) => {
        ev.stopPropagation();
        void this.remove(c.id);
      });
      return h("li", { class: c.id === this.conv?.id ? "active" : "", "data-testid": "conversation", "data-id": c.id, on: { click: () => void this.open(c.id) } },
        h("span", { class: "conv-title" }, c.title), del);
    }));
  }

  /** Deletes on a second click within a few seconds. */
  private async remove(id: string): Promise<void> {
    if (this.armedDelete !== id) {
      this.armedDelete = id;
      setTimeout(() => {
        if (this.armedDelete === id) {
          this.armedDelete = undefined;
          void this.renderList();
        }
      }, 3000);
      return this.renderList();
    }
    this.armedDelete = undefined;
    if (this.running && this.conv?.id === id) this.running.ctl.abort();
    await deleteConversation(id);
    if (this.conv?.id === id) this.conv = undefined;
    this.render();
    await this.renderList();
  }

  private render(): void {
    this.title.textContent = this.conv?.title ?? "New chat";
    replace(this.messagesEl, ...(this.conv?.messages ?? []).map((m) => this.messageEl(m)));
    if (!this.conv) this.messagesEl.append(h("p", { class: "empty" }, "Ask the model something. Conversations stay in this browser."));
    this.renderChips();
    this.updateContext();
    this.sendBtn.textContent = this.running ? "Stop" : "Send";
    this.sendBtn.dataset.state = this.running ? "running" : "idle";
    this.messagesEl.scrollTop = this.messagesEl.scrollHeight;
  }

  private renderChips(): void {
    replace(this.chips, ...this.pending.map((a, i) => h("span", { class: "chip" }, a.name,
      h("button", { type: "button", class: "icon", title: "remove", on: { click: () => { this.pending.splice(i, 1); this.renderChips(); } } }, "×"))));
  }

  private updateContext(): void {
    const nCtx = this.props()?.default_generation_settings.n_ctx ?? 0;
    const last = [...(this.conv?.messages ?? [])].reverse().find((m) => m.timings);
    const t = last?.timings;
    if (!t || nCtx <= 0) {
      this.ctxEl.textContent = nCtx > 0 ? `context 0 / ${nCtx}` : "";
      return;
    }
    const used = t.prompt_n + t.cache_n + t.predicted_n;
    this.ctxEl.textContent = `context ${used} / ${nCtx} (${Math.round((100 * used) / nCtx)}%)`;
  }

  private messageEl(m: ChatMessage): HTMLElement {
    const streaming = this.running?.msg === m;
    const parts: Child[] = [h("div", { class: "who" }, m.role === "user" ? "You" : (this.props()?.model_alias ?? "model"))];
    if (m.role === "assistant" && m.reasoning) {
      const open = settings().showReasoning || (streaming && m.content === "");
      parts.push(h("details", { class: "reasoning", "data-testid": "reasoning", open },
        h("summary", {}, streaming && m.content === "" ? "Reasoning…" : `Reasoning (${m.reasoning.length} characters)`),
        h("div", { class: "reasoning-text" }, m.reasoning)));
    }
    const body = h("div", { class: "body", "data-testid": "content" });
    if (m.role === "assistant") body.append(renderMarkdown(m.content));
    else body.append(h("p", { class: "plain" }, m.content));
    if (m.role === "assistant" && streaming && m.content === "" && !m.reasoning && !m.toolCalls?.length) body.append(h("span", { class: "typing" }, "…"));
    parts.push(body);
    if (m.toolCalls?.length) {
      parts.push(h("div", { class: "tool-calls" }, ...m.toolCalls.map((t) => h("details", { class: "tool-call", "data-testid": "tool-call", open: true },
        h("summary", {}, "tool call ", h("code", {}, t.name || "?")), h("pre", { class: "code" }, prettyJson(t.arguments))))));
    }
    if (m.attachments?.length) parts.push(h("div", { class: "chips" }, ...m.attachments.map((a) => h("span", { class: "chip", title: `${a.text.length} characters` }, a.name))));
    const meta: string[] = [];
    if (m.timings) meta.push(`${m.timings.predicted_n} tokens`, `${m.timings.predicted_per_second.toFixed(1)} t/s`, `prompt ${m.timings.prompt_n + m.timings.cache_n} (${m.timings.cache_n} cached)`);
    if (m.finish && m.finish !== "stop") meta.push(m.finish === "length" ? "hit the token limit" : m.finish);
    if (meta.length) parts.push(h("div", { class: "meta", "data-testid": "meta" }, meta.join(" · ")));
    if (m.error) parts.push(h("div", { class: "problems", "data-testid": "message-error" }, m.error));
    if (!streaming) parts.push(this.actions(m));
    return h("article", { class: `msg ${m.role}${streaming ? " streaming" : ""}`, "data-testid": "message", "data-role": m.role, "data-id": m.id, "data-finish": m.finish ?? "" }, ...parts);
  }

  private actions(m: ChatMessage): HTMLElement {
    const msgs = this.conv?.messages ?? [];
    const isLast = msgs[msgs.length - 1] === m;
    const bar = h("div", { class: "actions" },
      h("button", { class: "link", on: { click: () => void copy(m.content) } }, "Copy"),
      h("button", { class: "link", "data-testid": "edit", on: { click: () => this.edit(m) } }, "Edit"));
    if (m.role === "assistant" && isLast) bar.append(h("button", { class: "link", "data-testid": "regenerate", on: { click: () => void this.regenerate(m) } }, "Regenerate"));
    return bar;
  }

  /** A message's text in a box; a user message saved is sent again (the later messages go). */
  private edit(m: ChatMessage): void {
    if (this.running) return;
    const el = this.messagesEl.querySelector(`[data-id="${m.id}"]`);
    if (!el) return;
    const box = h("textarea", { class: "edit-box", rows: Math.min(12, m.content.split("\n").length + 1), "data-testid": "edit-box" }, m.content);
    const save = h("button", { class: "primary", "data-testid": "edit-save" }, m.role === "user" ? "Send" : "Save");
    save.addEventListener("click", () => void this.saveEdit(m, box.value));
    el.replaceWith(h("article", { class: `msg ${m.role} editing`, "data-testid": "message", "data-id": m.id }, box,
      h("div", { class: "actions" }, save, h("button", { on: { click: () => this.render() } }, "Cancel"))));
    box.focus();
  }

  private async saveEdit(m: ChatMessage, text: string): Promise<void> {
    const c = this.conv;
    if (!c || this.running) return;
    m.content = text;
    if (m.role === "assistant") {
      c.updated = Date.now();
      await putConversation(c);
      this.render();
      return;
    }
    c.messages = c.messages.slice(0, c.messages.indexOf(m) + 1);
    if (c.messages[0] === m) c.title = titleOf(text);
    await this.generate();
  }

  private async regenerate(m: ChatMessage): Promise<void> {
    const c = this.conv;
    if (!c || this.running) return;
    c.messages = c.messages.slice(0, c.messages.indexOf(m));
    await this.generate();
  }

  private async attach(input: HTMLInputElement): Promise<void> {
    for (const f of Array.from(input.files ?? [])) {
      const text = await f.text();
      if (text.length > MAX_ATTACHMENT) this.errorEl.textContent = `${f.name}: larger than ${MAX_ATTACHMENT / 1024} KiB of text; not attached`;
      else if (text.includes("\0")) this.errorEl.textContent = `${f.name}: not a text file; not attached`;
      else this.pending.push({ name: f.name, text });
    }
    input.value = "";
    this.renderChips();
  }

  private async sendOrStop(): Promise<void> {
    if (this.running) {
      this.running.ctl.abort();
      return;
    }
    const text = this.input.value.trim();
    if (text === "" && this.pending.length === 0) return;
    const now = Date.now();
    if (!this.conv) {
      this.conv = { id: newId(), title: titleOf(text || this.pending[0]?.name || "New chat"), created: now, updated: now, messages: [] };
      setCurrentId(this.conv.id);
    }
    const user: ChatMessage = { id: newId(), role: "user", content: text, created: now };
    if (this.pending.length) user.attachments = this.pending;
    this.conv.messages.push(user);
    this.pending = [];
    this.input.value = "";
    await this.generate();
  }

  /** Streams an answer to the conversation as it stands. */
  private async generate(): Promise<void> {
    const c = this.conv;
    if (!c) return;
    this.errorEl.textContent = "";
    const history = c.messages.slice();
    const msg: ChatMessage = { id: newId(), role: "assistant", content: "", created: Date.now() };
    c.messages.push(msg);
    const ctl = new AbortController();
    this.running = { ctl, msg };
    c.updated = Date.now();
    await putConversation(c);
    void this.renderList();
    this.render();
    const s = settings();
    const body = { messages: apiMessages(s.system, history), stream_options: { include_usage: true }, timings_per_token: true, cache_prompt: true, ...requestFields(s) };
    const take = (st: StreamState) => {
      msg.content = st.content;
      if (st.reasoning) msg.reasoning = st.reasoning;
      if (st.toolCalls.length) msg.toolCalls = st.toolCalls.map((t) => ({ ...t }));
      if (st.timings) msg.timings = st.timings;
    };
    try {
      const st = await streamChat(body, ctl.signal, (st) => {
        take(st);
        this.scheduleRender(msg);
        if (Date.now() - this.lastSave > SAVE_EVERY_MS) {
          this.lastSave = Date.now();
          void putConversation(c);
        }
      });
      take(st);
      msg.finish = st.finish;
    } catch (e) {
      msg.error = e instanceof Error ? e.message : String(e);
    } finally {
      this.running = undefined;
      c.updated = Date.now();
      await putConversation(c).catch((e: unknown) => (this.errorEl.textContent = `could not save: ${String(e)}`));
      if (this.conv === c) this.render();
      void this.renderList();
    }
  }

  private scheduleRender(m: ChatMessage): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      const el = this.messagesEl.querySelector(`[data-id="${m.id}"]`);
      if (!el) return;
      const stick = this.messagesEl.scrollHeight - this.messagesEl.scrollTop - this.messagesEl.clientHeight < 40;
      el.replaceWith(this.messageEl(m));
      this.updateContext();
      if (stick) this.messagesEl.scrollTop = this.messagesEl.scrollHeight;
    });
  }

  private async exportJson(): Promise<void> {
    const all = await listConversations();
    const blob = new Blob([JSON.stringify({ format: "bloomery-webui", version: 1, conversations: all }, null, 1)], { type: "application/json" });
    const a = h("a", { href: URL.createObjectURL(blob), download: "bloomery-conversations.json" });
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 10_000);
  }

  private async importJson(input: HTMLInputElement): Promise<void> {
    const f = input.files?.[0];
    input.value = "";
    if (!f) return;
    try {
      const data = JSON.parse(await f.text()) as { conversations?: Conversation[] };
      const list = Array.isArray(data.conversations) ? data.conversations : [];
      const valid = list.filter((c) => typeof c?.id === "string" && typeof c.title === "string" && Array.isArray(c.messages));
      for (const c of valid) await putConversation(c);
      this.errorEl.textContent = `imported ${valid.length} conversation(s)${valid.length < list.length ? `; ${list.length - valid.length} were not conversations` : ""}`;
      await this.renderList();
    } catch (e) {
      this.errorEl.textContent = `import: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
}

function prettyJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

async function copy(text: string): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // no clipboard outside secure contexts; nothing else to do
  }
}
