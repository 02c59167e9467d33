// bloomery web UI (browser): building DOM nodes without HTML strings - `h(tag, props, ...children)`
// sets text as text, never as markup, so model output cannot inject elements.

export type Child = Node | string | number | null | undefined | false;
type Handler = (ev: Event) => void;
export interface Props {
  class?: string;
  /** event listeners by event name ("click", "input", ...) */
  on?: Record<string, Handler>;
  [attr: string]: string | number | boolean | undefined | Record<string, Handler>;
}

/** An element with attributes, listeners and children (strings become text nodes). */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, props: Props = {}, ...children: (Child | Child[])[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === false) continue;
    if (k === "on" && typeof v === "object") {
      for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    } else if (k === "class") el.className = String(v);
    else if (typeof v !== "object") el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, ...children);
  return el;
}

/** Appends children (arrays flattened; null, undefined and false skipped). */
export function append(el: Node, ...children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

/** Replaces an element's children. */
export function replace(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, ...children);
}

/** "1.2 KiB", "3.4 MiB", ... */
export function bytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n, i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

/** "3 s ago", "2 min ago", ... */
export function ago(ms: number, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  return `${Math.round(s / 3600)} h ago`;
}

/** A random id (conversations, messages); getRandomValues works outside secure contexts too (a LAN address over http). */
export function newId(): string {
  return Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(16).padStart(2, "0")).join("");
}
