// bloomery web UI (browser): the page's shell - a header with the two views (Chat at ./, Placement
// at ./placement; switched without reloading), the server's props loaded once (with "Loading
// model" while the server answers 503, and the API key asked for when it answers 401).
import { ApiError, base, getJson } from "./api.ts";
import { ChatView } from "./chat.ts";
import type { ServerProps } from "./dialogs.ts";
import { h, replace } from "./dom.ts";
import { PlacementView } from "./placement.ts";
import { applyTheme, saveSettings, settings } from "./settings.ts";

type ViewName = "chat" | "placement";

class App {
  private props: ServerProps | undefined;
  private readonly chat = new ChatView(() => this.props);
  private readonly placement = new PlacementView();
  private readonly main = h("main", { class: "view" });
  private readonly banner = h("div", { class: "banner", "data-testid": "banner", hidden: true });
  private readonly model = h("span", { class: "model-name", "data-testid": "model-name" });
  private readonly tabs = {
    chat: h("a", { href: base().href, "data-view": "chat", "data-testid": "tab-chat" }, "Chat"),
    placement: h("a", { href: new URL("placement", base()).href, "data-view": "placement", "data-testid": "tab-placement" }, "Placement"),
  };
  private view: ViewName | undefined;
  private chatStarted = false;

  mount(root: HTMLElement): void {
    for (const [name, a] of Object.entries(this.tabs) as [ViewName, HTMLAnchorElement][]) {
      a.addEventListener("click", (ev) => {
        ev.preventDefault();
        history.pushState(null, "", a.href);
        this.show(name);
      });
    }
    window.addEventListener("popstate", () => this.show(viewOfPath()));
    replace(root,
      h("header", { class: "top" }, h("span", { class: "brand" }, "bloomery"), h("nav", {}, this.tabs.chat, this.tabs.placement), this.model),
      this.banner,
      this.main);
    void this.loadProps();
    this.show(viewOfPath());
  }

  private show(v: ViewName): void {
    if (this.view === v) return;
    this.view = v;
    for (const [name, a] of Object.entries(this.tabs)) a.classList.toggle("active", name === v);
    document.title = v === "chat" ? "bloomery · chat" : "bloomery · placement";
    if (v === "chat") {
      this.placement.stop();
      replace(this.main, this.chat.el);
      if (!this.chatStarted) {
        this.chatStarted = true;
        void this.chat.start();
      }
    } else {
      replace(this.main, this.placement.el);
      this.placement.start();
    }
  }

  /** GET props until it answers: 503 while loading, 401 asks for the key. */
  private async loadProps(): Promise<void> {
    for (;;) {
      try {
        this.props = await getJson<ServerProps>("props");
        this.banner.hidden = true;
        this.model.textContent = `${this.props.model_alias} · ${this.props.backend ?? ""}`;
        return;
      } catch (e) {
        if (e instanceof ApiError && e.status === 401) {
          this.askKey();
          return;
        }
        this.say(e instanceof ApiError && e.status === 503 ? "Loading model…" : `The server does not answer (${e instanceof Error ? e.message : String(e)}); retrying`);
      }
      await new Promise((r) => setTimeout(r, 1000));
    }
  }

  private say(text: string): void {
    this.banner.hidden = false;
    replace(this.banner, text);
  }

  private askKey(): void {
    const input = h("input", { type: "password", placeholder: "API key", "data-testid": "key-input", autocomplete: "off" });
    const go = h("button", { class: "primary", "data-testid": "key-save" }, "Use this key");
    go.addEventListener("click", () => {
      saveSettings({ ...settings(), apiKey: input.value.trim() });
      this.banner.hidden = true;
      void this.loadProps();
    });
    this.banner.hidden = false;
    replace(this.banner, h("span", {}, "This server needs an API key (--api-key). "), input, go,
      h("small", {}, " Kept in this browser's storage, sent as Authorization: Bearer."));
    input.focus();
  }
}

function viewOfPath(): ViewName {
  return location.pathname.endsWith("/placement") ? "placement" : "chat";
}

applyTheme(settings().theme);
new App().mount(document.getElementById("app") ?? document.body);
