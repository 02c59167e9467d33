// bloomery GGUF: the error every malformed or unreadable file gives (names file and what is wrong).
export class GgufError extends Error {
  constructor(
    readonly file: string,
    readonly detail: string,
  ) {
    super(`${file}: ${detail}`);
    this.name = "GgufError";
  }
}
