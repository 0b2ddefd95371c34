// A remote A2A agent nobody at crewlet wrote the server of: @a2a-js/sdk's
// DefaultRequestHandler and Express handlers, as its README wires them,
// with an executor of the test's. The remote-agent tests
// (remote_agent_test.go) run it from the folder npm installed the SDK
// into, delegate to it from a crewlet seat, and read what it prints, one
// line an event:
//
//   listening PORT
//   rpc METHOD                     each JSON-RPC call
//   message ID task TASK|new TEXT  each message the executor is given
//
// "please review X" is worked on until the file named by RELEASE exists,
// then completed with "Reviewed X". "please review X carefully" asks which
// part first (input-required), and is completed with the answer. Every
// request must carry "Authorization: Bearer $TOKEN" (the token comes in
// the environment, never on the command line).
import express from 'express';
import { existsSync } from 'node:fs';
import { AgentCard, Message, Task, TaskArtifactUpdateEvent, TaskStatusUpdateEvent } from '@a2a-js/sdk';
import { DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler } from '@a2a-js/sdk/server/express';

const port = Number(process.env.PORT);
const token = process.env.TOKEN;
const release = process.env.RELEASE;
const base = `http://127.0.0.1:${port}`;

const card = AgentCard.fromJSON({
  name: 'review',
  description: 'Reviews what it is given.',
  version: '1',
  supportedInterfaces: [{ url: `${base}/a2a`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
  capabilities: { streaming: true, pushNotifications: false },
  defaultInputModes: ['text/plain'],
  defaultOutputModes: ['text/plain'],
  skills: [{ id: 'review', name: 'review', description: 'reviews code', tags: ['review'] }],
});

const textOf = (m) => (m?.parts ?? []).map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join(' ');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const executor = {
  async execute(ctx, bus) {
    const m = ctx.userMessage;
    const text = textOf(m);
    console.log(`message ${m.messageId} task ${ctx.task ? ctx.taskId : 'new'} ${text}`);
    const status = (state, said) =>
      bus.publish({
        kind: 'statusUpdate',
        data: TaskStatusUpdateEvent.fromJSON({
          taskId: ctx.taskId,
          contextId: ctx.contextId,
          status: {
            state,
            timestamp: new Date().toISOString(),
            message: said && { messageId: `${ctx.taskId}-${state}`, contextId: ctx.contextId, taskId: ctx.taskId, role: 'ROLE_AGENT', parts: [{ text: said }] },
          },
        }),
      });
    const complete = (reply) => {
      bus.publish({
        kind: 'artifactUpdate',
        data: TaskArtifactUpdateEvent.fromJSON({
          taskId: ctx.taskId, contextId: ctx.contextId, lastChunk: true,
          artifact: { artifactId: 'review', name: 'review', parts: [{ text: reply }] },
        }),
      });
      status('TASK_STATE_COMPLETED');
      bus.finished();
    };
    bus.publish({
      kind: 'task',
      data: ctx.task ?? Task.fromJSON({ id: ctx.taskId, contextId: ctx.contextId, status: { state: 'TASK_STATE_SUBMITTED' }, history: [Message.toJSON(m)] }),
    });
    if (ctx.task) {
      complete(`Reviewed ${textOf(ctx.task.history?.[0]).replace(/^please review /, '').replace(/ carefully$/, '')}, looking at ${text}`);
      return;
    }
    const what = text.replace(/^please review /, '');
    if (what.endsWith(' carefully')) {
      status('TASK_STATE_INPUT_REQUIRED', `which part of ${what.replace(/ carefully$/, '')}?`);
      bus.finished();
      return;
    }
    status('TASK_STATE_WORKING', `reviewing ${what}`);
    while (!existsSync(release)) await sleep(100);
    complete(`Reviewed ${what}`);
  },
  async cancelTask(taskId, bus) {
    console.log(`cancel ${taskId}`);
    bus.publish({ kind: 'statusUpdate', data: TaskStatusUpdateEvent.fromJSON({ taskId, status: { state: 'TASK_STATE_CANCELED' } }) });
    bus.finished();
  },
};

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
const app = express();
app.use((req, res, next) => {
  if (req.headers.authorization !== `Bearer ${token}`) {
    console.log(`refused ${req.method} ${req.path}`);
    res.status(401).json({ error: 'unauthorized' });
    return;
  }
  next();
});
app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
app.use('/a2a', express.json(), (req, _res, next) => {
  console.log(`rpc ${req.body?.method}`);
  next();
});
app.use('/a2a', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication }));
app.listen(port, '127.0.0.1', () => console.log(`listening ${port}`));
