// bloomery: lets TypeScript import native libraries as files (Bun embeds them in the executable).
declare module "*.so" {
  const path: string;
  export default path;
}
declare module "*.dylib" {
  const path: string;
  export default path;
}
declare module "*.gguf" {
  const path: string;
  export default path;
}
