// bloomery web UI (browser): conversations kept in this browser's IndexedDB (database
// "bloomery-webui", store "conversations", one record a conversation with its messages), and
// which one was open last (localStorage). Nothing is stored on the server.

export interface ToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface Timings {
  prompt_n: number;
  prompt_ms: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_second: number;
  cache_n: number;
}

export interface Attachment {
  name: string;
  text: string;
}

export interface ChatMessage {
  id: string;
  role: "user" | "assistant";
  content: string;
  /** the model's reasoning_content, shown folded apart */
  reasoning?: string;
  toolCalls?: ToolCall[];
  /** text files sent with a user message */
  attachments?: Attachment[];
  timings?: Timings;
  /** stop, length, tool_calls; "stopped" when the user stopped it */
  finish?: string;
  error?: string;
  created: number;
}

export interface Conversation {
  id: string;
  title: string;
  created: number;
  updated: number;
  messages: ChatMessage[];
}

const DB = "bloomery-webui";
const STORE = "conversations";
const CURRENT = "bloomery-webui.current";

let db: Promise<IDBDatabase> | undefined;

function open(): Promise<IDBDatabase> {
  db ??= new Promise((resolve, reject) => {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => {
      const s = req.result.createObjectStore(STORE, { keyPath: "id" });
      s.createIndex("updated", "updated");
    };
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error ?? new Error("IndexedDB would not open"));
  });
  return db;
}

function run<T>(mode: IDBTransactionMode, f: (s: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  return open().then((d) => new Promise<T>((resolve, reject) => {
    const tx = d.transaction(STORE, mode);
    const req = f(tx.objectStore(STORE));
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error ?? new Error("IndexedDB transaction failed"));
    tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
  }));
}

/** Every conversation, the most recently updated first. */
export async function listConversations(): Promise<Conversation[]> {
  const all = await run<Conversation[]>("readonly", (s) => s.getAll() as IDBRequest<Conversation[]>);
  return all.sort((a, b) => b.updated - a.updated);
}

export function getConversation(id: string): Promise<Conversation | undefined> {
  return run<Conversation | undefined>("readonly", (s) => s.get(id) as IDBRequest<Conversation | undefined>);
}

export async function putConversation(c: Conversation): Promise<void> {
  // a structured clone of plain data (no proxies, no DOM)
  await run("readwrite", (s) => s.put(JSON.parse(JSON.stringify(c)) as Conversation));
}

export async function deleteConversation(id: string): Promise<void> {
  await run("readwrite", (s) => s.delete(id));
  if (currentId() === id) setCurrentId(undefined);
}

export function currentId(): string | undefined {
  return localStorage.getItem(CURRENT) ?? undefined;
}

export function setCurrentId(id: string | undefined): void {
  if (id === undefined) localStorage.removeItem(CURRENT);
  else localStorage.setItem(CURRENT, id);
}

/** A title from the first line of the first message. */
export function titleOf(text: string): string {
  const line = text.split("\n").map((l) => l.trim()).find((l) => l !== "") ?? "New chat";
  return line.length > 48 ? `${line.slice(0, 47)}…` : line;
}
