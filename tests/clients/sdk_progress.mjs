// Calls `execute` with the official TypeScript MCP SDK client, asking for progress.
//
// Reads {"sdk": SDK_DIR, "command": "...", "args": [...], "source": "..."} on stdin
// (SDK_DIR: the installed @modelcontextprotocol/sdk package) and prints
// {"wire": [["progress", progress, total, message] | ["answer"], ...], "progress":
// [[progress, total, message], ...], "result": CallToolResult}: the progress
// notifications and the answer in the order the transport read them, what the
// onprogress callback received, and the answer.
//
// Both are kept because the SDK dispatches a notification a microtask later but
// an answer at once: a notification read in the same chunk as the answer reaches
// no callback (typescript-sdk#2580), so only the wire order is the server's to
// keep.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const script = JSON.parse(readFileSync(0, "utf8"));
const load = (path) => import(pathToFileURL(`${script.sdk}/dist/esm/${path}`).href);
const { Client } = await load("client/index.js");
const { StdioClientTransport } = await load("client/stdio.js");

const client = new Client({ name: "codemode-progress-test", version: "1.0.0" });
const transport = new StdioClientTransport({ command: script.command, args: script.args });
await client.connect(transport);
const wire = [];
const deliver = transport.onmessage;
transport.onmessage = (message, extra) => {
  if (message.method === "notifications/progress") {
    const p = message.params;
    wire.push(["progress", p.progress, p.total ?? null, p.message ?? null]);
  } else if (message.id !== undefined && ("result" in message || "error" in message)) {
    wire.push(["answer"]);
  }
  deliver(message, extra);
};
const progress = [];
const result = await client.callTool(
  { name: "execute", arguments: { source: script.source } },
  undefined,
  { onprogress: (p) => progress.push([p.progress, p.total ?? null, p.message ?? null]) },
);
process.stdout.write(JSON.stringify({ wire, progress, result }));
await client.close();
