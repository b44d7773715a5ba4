// Calls `execute` with the official TypeScript MCP SDK client, asking for progress.
//
// Reads {"sdk": SDK_DIR, "command": "...", "args": [...], "source": "..."} on stdin
// (SDK_DIR: the installed @modelcontextprotocol/sdk package) and prints
// {"progress": [[progress, total, message], ...], "result": CallToolResult}: what
// the onprogress callback received before the answer, and the answer.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const script = JSON.parse(readFileSync(0, "utf8"));
const load = (path) => import(pathToFileURL(`${script.sdk}/dist/esm/${path}`).href);
const { Client } = await load("client/index.js");
const { StdioClientTransport } = await load("client/stdio.js");

const client = new Client({ name: "codemode-progress-test", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command: script.command, args: script.args }));
const progress = [];
const result = await client.callTool(
  { name: "execute", arguments: { source: script.source } },
  undefined,
  { onprogress: (p) => progress.push([p.progress, p.total ?? null, p.message ?? null]) },
);
process.stdout.write(JSON.stringify({ progress, result }));
await client.close();
