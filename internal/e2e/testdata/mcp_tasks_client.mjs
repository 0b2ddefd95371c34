// An MCP client of the tasks utility, written with the official TypeScript
// SDK's own calls (client.experimental.tasks): it calls ask_ tools as tasks
// and polls them, answers a seat's question through its elicitation
// handler, and cancels a task. Run as: node mcp_tasks_client.mjs URL TOKEN.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: "Bearer " + token } },
});
const client = new Client({ name: "crewlet-tasks", version: "1.0.0" }, { capabilities: { elicitation: {} } });
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const task = request.params._meta?.["io.modelcontextprotocol/related-task"]?.taskId;
  console.log("elicited for " + task + ": " + request.params.message);
  return { action: "accept", content: { answer: "the auth part" } };
});
await client.connect(transport);
console.log("tasks capability: " + JSON.stringify(client.getServerCapabilities().tasks));
// Listing the tools tells the client which run as tasks.
const { tools } = await client.listTools();
console.log("task tools: " + tools.filter((t) => t.execution?.taskSupport === "optional").map((t) => t.name).sort().join(" "));

// callToolStream makes the call a task (the tool's taskSupport says it
// may), polls tasks/get, and on input_required calls tasks/result, on
// whose stream the question comes as an elicitation.
async function askAsTask(name, text) {
  for await (const m of client.experimental.tasks.callToolStream({ name, arguments: { text } })) {
    switch (m.type) {
      case "taskCreated":
        console.log(name + " created " + m.task.taskId + " " + m.task.status);
        break;
      case "taskStatus":
        console.log(name + " status " + m.task.taskId + " " + m.task.status);
        break;
      case "result":
        console.log(name + " result: " + m.result.content.map((c) => c.text).join(""));
        break;
      case "error":
        console.log(name + " error: " + m.error.message);
        break;
    }
  }
}
await askAsTask("ask_s01", "what is the answer");
await askAsTask("ask_r01", "please review the API");

let slow;
for await (const m of client.experimental.tasks.callToolStream({ name: "ask_s02", arguments: { text: "what is slow" } })) {
  if (m.type === "taskCreated") {
    slow = m.task.taskId;
    break;
  }
}
const cancelled = await client.experimental.tasks.cancelTask(slow);
console.log("cancel " + slow + " " + cancelled.status);
console.log("get " + slow + " " + (await client.experimental.tasks.getTask(slow)).status);
try {
  await client.experimental.tasks.cancelTask(slow);
  console.log("cancel again: answered");
} catch (e) {
  console.log("cancel again: " + e.code);
}
try {
  await client.experimental.tasks.getTask("t-000000000000");
  console.log("get unknown: answered");
} catch (e) {
  console.log("get unknown: " + e.code);
}
const { tasks } = await client.experimental.tasks.listTasks();
console.log("list: " + tasks.map((t) => t.taskId + "=" + t.status).join(" "));
await client.close();
console.log("done");
