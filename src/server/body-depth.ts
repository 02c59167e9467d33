// bloomery server: the nesting depth of a JSON text, checked in one pass before it is parsed
// (a body of 100,000 nested arrays costs JSON.parse time that grows with the square of the depth).

/** Deepest nesting of arrays and objects a request body may have (llama-server's bodies need a dozen). */
export const MAX_JSON_DEPTH = 128;

export class JsonDepthError extends Error {
  override readonly name = "JsonDepthError";
}

/** Throws JsonDepthError when `text` opens more than `maxDepth` arrays or objects inside each other. */
export function checkJsonDepth(text: string, maxDepth = MAX_JSON_DEPTH): void {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++; // backslash: skip the escaped character
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > maxDepth) throw new JsonDepthError(`the request body nests arrays and objects more than ${maxDepth} levels deep (at character ${i})`);
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
}
