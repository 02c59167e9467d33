// bloomery server: the messages between the serving thread and the body worker (body-worker.ts).

export type BodyRequest =
  | { type: "vocab"; vocab: unknown }
  | { type: "parse"; id: number; bytes: Uint8Array; maxDepth: number }
  | { type: "encode"; id: number; text: string; addSpecial: boolean; parseSpecial: boolean };

export type BodyReply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: true; ids: Int32Array }
  | { id: number; ok: false; kind: "depth" | "syntax" | "tokenizer"; message: string };
