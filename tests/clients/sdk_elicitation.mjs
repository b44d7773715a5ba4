// Calls `execute` with the official TypeScript MCP SDK client, answering the
// server's elicitation requests (a human approving a call).
//
// Reads {"sdk": SDK_DIR, "command": "...", "args": [...], "answers": [ANSWER, ...],
// "sources": ["...", ...]} on stdin, or "url" (and "headers") instead of
// "command" for Streamable HTTP. SDK_DIR is the installed @modelcontextprotocol/sdk
// package. The client declares form elicitation and answers each request with the
// next ANSWER (an ElicitResult; the last one is reused). Prints {"elicitations":
// [the requests' params, ...], "results": [CallToolResult, ...]}, one result per
// source, called in order.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const script = JSON.parse(readFileSync(0, "utf8"));
const load = (path) => import(pathToFileURL(`${script.sdk}/dist/esm/${path}`).href);
const { Client } = await load("client/index.js");
const { ElicitRequestSchema } = await load("types.js");

let transport;
if (script.url) {
  const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(script.url), {
    requestInit: { headers: script.headers ?? {} },
  });
} else {
  const { StdioClientTransport } = await load("client/stdio.js");
  transport = new StdioClientTransport({ command: script.command, args: script.args });
}

const client = new Client(
  { name: "codemode-elicitation-test", version: "1.0.0" },
  { capabilities: { elicitation: { form: {} } } },
);
const answers = [...script.answers];
const elicitations = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  elicitations.push(request.params);
  return answers.length > 1 ? answers.shift() : answers[0];
});
await client.connect(transport);
const results = [];
for (const source of script.sources) {
  results.push(await client.callTool({ name: "execute", arguments: { source } }));
}
process.stdout.write(JSON.stringify({ elicitations, results }));
await client.close();
