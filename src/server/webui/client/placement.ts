// bloomery web UI (browser): the placement view - reads GET placement/state as a stream of events
// and draws: per layer each routed expert's tier and how often it was picked lately (a heat map),
// what promotion moved, the prompt cache's entries, and the last steps' time split between the
// card, the CPU and the copies. Where the backend does not count picks it says so, in place.
import { api, ApiError, sseEvents } from "./api.ts";
import { ago, bytes, h, replace } from "./dom.ts";
import type { PlacementLayer, PlacementState, PlacementStep } from "../../../engine/placement-types.ts";

const TIER_NAMES: Record<string, string> = { card: "card", host: "host RAM", disk: "disk cache" };
/** Steps drawn in the chart. */
const CHART_STEPS = 120;

export class PlacementView {
  readonly el: HTMLElement;
  private readonly status = h("p", { class: "status", "data-testid": "placement-status" }, "connecting…");
  private readonly summary = h("div", { class: "cards" });
  private readonly notice = h("p", { class: "notice", "data-testid": "heat-unavailable", hidden: true });
  private readonly heat = h("div", { class: "heatmap", "data-testid": "heatmap" });
  private readonly steps = h("div", { class: "steps" });
  private readonly promotion = h("div", { class: "promotion", "data-testid": "promotion" });
  private readonly cache = h("div", { class: "prompt-cache", "data-testid": "prompt-cache" });
  private ctl: AbortController | undefined;
  /** the last state drawn (tests and scripts can read it from the element too) */
  last: PlacementState | undefined;

  constructor() {
    this.el = h("div", { class: "placement" },
      h("div", { class: "placement-head" }, h("h2", {}, "Where the experts are"), this.status),
      this.summary,
      h("section", {}, h("h3", {}, "Routed experts: tier and recent picks"), this.notice, this.heat, legend()),
      h("section", {}, h("h3", {}, "Time per step: card, CPU, copies"), this.steps),
      h("div", { class: "two" },
        h("section", {}, h("h3", {}, "Promotion"), this.promotion),
        h("section", {}, h("h3", {}, "Prompt cache"), this.cache)));
  }

  /** Follows the stream until stop(); reconnects after a failure. */
  start(): void {
    if (this.ctl) return;
    const ctl = new AbortController();
    this.ctl = ctl;
    void (async () => {
      while (!ctl.signal.aborted) {
        try {
          const res = await api("placement/state?stream=1&interval_ms=1000", { signal: ctl.signal, headers: { Accept: "text/event-stream" } });
          this.status.textContent = "live";
          for await (const ev of sseEvents(res)) {
            if (ev.event === "placement") this.draw(JSON.parse(ev.data) as PlacementState);
            else if (ev.event === "error") this.status.textContent = `error: ${ev.data}`;
          }
        } catch (e) {
          if (ctl.signal.aborted) break;
          this.status.textContent = e instanceof ApiError && e.status === 401 ? "the API key is missing or wrong (Settings in the chat view)" : `disconnected (${e instanceof Error ? e.message : String(e)}); retrying`;
        }
        await new Promise((r) => setTimeout(r, 2000));
      }
    })();
  }

  stop(): void {
    this.ctl?.abort();
    this.ctl = undefined;
  }

  draw(s: PlacementState): void {
    this.last = s;
    this.el.dataset.steps = String(s.steps.total);
    this.el.dataset.picks = String(s.picks.total);
    this.status.textContent = `live · ${new Date(s.time_ms).toLocaleTimeString()}`;
    const slots = `${s.engine.slots_busy} of ${s.engine.slots} busy${s.engine.queued ? `, ${s.engine.queued} waiting` : ""}`;
    replace(this.summary,
      card("backend", s.backend),
      card("model", `${s.layers.length} MoE layers × ${s.n_expert} experts, ${s.n_expert_used} a token`),
      card("forward passes", String(s.engine.n_decode), "steps-total"),
      card("slots", slots),
      s.expert_cache ? card("disk cache", `${s.expert_cache.resident} of ${s.expert_cache.slots} experts in RAM; ${pct(s.expert_cache.hits, s.expert_cache.lookups)} hits; ${bytes(s.expert_cache.read_bytes)} read`) : null,
      s.plan ? h("p", { class: "plan-line" }, s.plan.line) : null);
    this.notice.hidden = s.picks.available;
    this.notice.textContent = s.picks.available ? "" : `Expert picks: ${s.picks.reason ?? "not reported by this backend yet"}. The map shows each layer's tier only.`;
    this.drawHeat(s);
    this.drawSteps(s.steps.recent, s.backend);
    this.drawPromotion(s);
    this.drawCache(s);
  }

  private drawHeat(s: PlacementState): void {
    const max = Math.max(1e-9, ...s.layers.flatMap((l) => l.heat ?? [0]));
    const cols = Math.max(1, ...s.layers.map((l) => l.n_expert));
    this.heat.style.setProperty("--cols", String(cols));
    replace(this.heat, ...s.layers.map((l) => h("div", { class: "heat-row", "data-layer": l.layer },
      h("span", { class: `layer-label tier-${l.tier}`, title: `layer ${l.layer}: experts in ${TIER_NAMES[l.tier] ?? l.tier}` }, `${l.layer}`),
      h("div", { class: "heat-cells" }, ...cells(l, max)))));
    this.heat.dataset.available = String(s.picks.available);
  }

  private drawSteps(recent: PlacementStep[], backend: string): void {
    const last = recent.slice(-CHART_STEPS);
    if (last.length === 0) {
      replace(this.steps, h("p", { class: "empty" }, "No forward pass yet: send a request."));
      return;
    }
    const top = Math.max(...last.map((r) => r.ms), 1e-6);
    const bars = last.map((r) => {
      const bar = h("div", { class: "bar", title: `${r.tokens} tokens (${r.prompt_tokens} prompt), ${r.seqs} sequences: ${r.ms.toFixed(2)} ms = card ${r.card_ms.toFixed(2)} + CPU ${r.cpu_ms.toFixed(2)} + copies ${r.copy_ms.toFixed(2)}` });
      for (const [k, v] of [["card", r.card_ms], ["cpu", r.cpu_ms], ["copy", r.copy_ms]] as const) {
        const seg = h("div", { class: `seg ${k}` });
        seg.style.height = `${(100 * v) / top}%`;
        bar.append(seg);
      }
      return bar;
    });
    const sum = (k: "ms" | "card_ms" | "cpu_ms" | "copy_ms") => last.reduce((a, r) => a + r[k], 0);
    const toks = last.reduce((a, r) => a + r.tokens, 0);
    const total = sum("ms");
    replace(this.steps,
      h("div", { class: "chart", "data-testid": "step-chart" }, ...bars),
      h("p", { class: "step-sum" },
        `last ${last.length} steps: ${total.toFixed(1)} ms for ${toks} tokens; `,
        h("span", { class: "key card" }), ` card ${pct(sum("card_ms"), total)} `,
        h("span", { class: "key cpu" }), ` CPU ${pct(sum("cpu_ms"), total)} `,
        h("span", { class: "key copy" }), ` copies ${pct(sum("copy_ms"), total)}`,
        backend === "CPU" ? " (the CPU backend: every step runs on the CPU)" : " (the CPU's part is the host experts' own time, which overlaps the card's; copies at the measured PCIe rate)"));
  }

  private drawPromotion(s: PlacementState): void {
    const p = s.promotion;
    if (!p) {
      replace(this.promotion, h("p", { class: "empty" }, "No routed experts in host RAM beside a card: nothing to promote."));
      return;
    }
    const events = [...p.events].reverse().slice(0, 12);
    replace(this.promotion,
      h("p", {}, p.slots > 0 ? `${p.slots} card slots a host layer; ${p.promoted_total} experts moved so far; ${pct(p.resident_picks_total, p.picks_total)} of one-token picks found on the card` : "promotion is off (--promote-slots 0)"),
      events.length ? h("ul", { class: "events" }, ...events.map((e) => h("li", {}, `${new Date(e.t_ms).toLocaleTimeString()}: ${e.promoted} expert${e.promoted === 1 ? "" : "s"} moved into card slots`))) : h("p", { class: "empty" }, "no moves in the recent steps"));
  }

  private drawCache(s: PlacementState): void {
    const c = s.prompt_cache;
    const head = h("p", {}, `${c.entries.length} ${c.entries.length === 1 ? "entry" : "entries"}, ${bytes(c.bytes)}${c.card_bytes ? ` (${bytes(c.card_bytes)} on the card)` : ""}; ${c.hits} hits, ${c.misses} misses, ${c.tokens_restored} tokens restored`);
    if (c.entries.length === 0) {
      replace(this.cache, head, h("p", { class: "empty" }, "empty: a slot's prompt is saved here when the slot takes another one"));
      return;
    }
    replace(this.cache, head, h("table", { class: "list" },
      h("tr", {}, h("th", {}, "tokens"), h("th", {}, "size"), h("th", {}, "where"), h("th", {}, "used"), h("th", {}, "starts with")),
      ...c.entries.map((e) => h("tr", { "data-testid": "cache-entry" }, h("td", {}, e.n_tokens), h("td", {}, bytes(e.bytes)), h("td", {}, e.where),
        h("td", {}, ago(e.used_at_ms, s.time_ms)), h("td", { class: "preview" }, e.preview ?? "(hidden: --no-slots)")))));
  }
}

function cells(l: PlacementLayer, max: number): HTMLElement[] {
  const out: HTMLElement[] = [];
  for (let e = 0; e < l.n_expert; e++) {
    const heat = l.heat?.[e];
    const picks = l.picks?.[e];
    const c = h("span", {
      class: `cell tier-${l.tier}`, "data-expert": e, "data-heat": heat ?? "",
      title: `layer ${l.layer}, expert ${e}: ${TIER_NAMES[l.tier] ?? l.tier}` + (heat === undefined ? "; picks not reported" : `; ${heat.toFixed(1)} recent picks, ${picks ?? 0} since load`),
    });
    if (heat !== undefined) c.style.setProperty("--heat", (Math.sqrt(heat / max)).toFixed(3));
    out.push(c);
  }
  return out;
}

function legend(): HTMLElement {
  return h("p", { class: "legend" },
    ...Object.entries(TIER_NAMES).map(([k, v]) => h("span", {}, h("span", { class: `swatch tier-${k}` }), ` ${v} `)),
    h("span", { class: "ramp" }), " picked lately: none → most");
}

function card(label: string, value: string, testid?: string): HTMLElement {
  return h("div", { class: "stat", ...(testid ? { "data-testid": testid } : {}) }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
}

function pct(a: number, b: number): string {
  return b > 0 ? `${Math.round((100 * a) / b)}%` : "-";
}
