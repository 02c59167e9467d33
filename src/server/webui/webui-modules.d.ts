// bloomery web UI: lets the server import its style sheet and the browser bundle as text
// (`with { type: "text" }`), so `bun build --compile` embeds them in the executable.
declare module "*.css" {
  const text: string;
  export default text;
}
declare module "*/webui-app.js" {
  const text: string;
  export default text;
}
