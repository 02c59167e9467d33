// bloomery web UI (browser): a small Markdown renderer for answers, building DOM nodes (never
// HTML from the text): fenced code blocks (an unclosed fence while streaming is still code),
// headings, lists, quotes, paragraphs; inline code, bold, italic and http(s) links.
import { h, type Child } from "./dom.ts";

const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*)|\[([^\]\n]+)\]\((https?:\/\/[^)\s]+)\)/g;

/** Inline spans of one line or paragraph. */
export function inline(text: string): Child[] {
  const out: Child[] = [];
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    const at = m.index ?? 0;
    if (at > last) out.push(text.slice(last, at));
    if (m[1]) out.push(h("code", {}, m[1].slice(1, -1)));
    else if (m[2]) out.push(h("strong", {}, m[2].slice(2, -2)));
    else if (m[3]) out.push(h("em", {}, m[3].slice(1, -1)));
    else if (m[4] && m[5]) out.push(h("a", { href: m[5], target: "_blank", rel: "noopener noreferrer" }, m[4]));
    last = at + m[0].length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

function withBreaks(lines: string[]): Child[] {
  const out: Child[] = [];
  lines.forEach((l, i) => {
    if (i > 0) out.push(h("br"));
    out.push(...inline(l));
  });
  return out;
}

/** The text as block elements. */
export function renderMarkdown(text: string): DocumentFragment {
  const frag = document.createDocumentFragment();
  const lines = text.replace(/\r\n/g, "\n").split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = /^\s*(```+|~~~+)\s*([\w+#.-]*)/.exec(line);
    if (fence) {
      const body: string[] = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++; // the closing fence (or past the end)
      const code = h("code", fence[2] ? { "data-lang": fence[2] } : {}, body.join("\n"));
      frag.append(h("pre", { class: "code" }, code));
      continue;
    }
    if (line.trim() === "") {
      i++;
      continue;
    }
    const head = /^(#{1,6})\s+(.*)$/.exec(line);
    if (head) {
      const tag = `h${Math.min(6, head[1].length + 2)}` as "h3" | "h4" | "h5" | "h6";
      frag.append(h(tag, {}, ...inline(head[2])));
      i++;
      continue;
    }
    const item = /^\s*([-*+]|\d+[.)])\s+/;
    if (item.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = h(ordered ? "ol" : "ul");
      while (i < lines.length && item.test(lines[i])) {
        list.append(h("li", {}, ...inline(lines[i].replace(item, ""))));
        i++;
      }
      frag.append(list);
      continue;
    }
    if (line.startsWith(">")) {
      const quoted: string[] = [];
      while (i < lines.length && lines[i].startsWith(">")) quoted.push(lines[i++].replace(/^>\s?/, ""));
      frag.append(h("blockquote", {}, ...withBreaks(quoted)));
      continue;
    }
    const para: string[] = [];
    while (i < lines.length && lines[i].trim() !== "" && !/^\s*(```|~~~)/.test(lines[i]) && !/^#{1,6}\s/.test(lines[i]) && !item.test(lines[i])) para.push(lines[i++]);
    frag.append(h("p", {}, ...withBreaks(para)));
  }
  return frag;
}
