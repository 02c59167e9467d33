// bloomery web UI: the embedded files - the page, its style sheet and the browser bundle
// (build/webui-app.js, made from ./client by scripts/build-webui.ts) - with their types and ETags.
// Imported lazily by routes.ts: a checkout whose bundle was not built still serves the API.
import { PAGE_HTML } from "./page.ts";
import style from "./style.css" with { type: "text" };
import app from "../../../build/webui-app.js" with { type: "text" };

export interface Asset {
  body: string;
  type: string;
  etag: string;
}

function asset(body: string, type: string): Asset {
  return { body, type, etag: `"${Bun.hash(body).toString(36)}"` };
}

/** The files under the UI's paths (within --api-prefix). */
export const ASSETS: ReadonlyMap<string, Asset> = new Map([
  ["/", asset(PAGE_HTML, "text/html; charset=utf-8")],
  ["/webui/style.css", asset(style, "text/css; charset=utf-8")],
  ["/webui/app.js", asset(app, "text/javascript; charset=utf-8")],
]);
