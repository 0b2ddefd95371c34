// @a2a-js/sdk's client registers a webhook for a task, as its README
// does. TestA2APushWebhookGetsEachStateOnceAcrossAnAPIRestart
// (a2a_push_test.go) runs it and reads what it prints, one line a step.
// The bearer token comes in A2A_TOKEN, the webhook's URL in A2A_HOOK.
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const api = process.env.A2A_API;
const token = process.env.A2A_TOKEN;
const hook = process.env.A2A_HOOK;

const authFetch = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', 'Bearer ' + token);
  return fetch(url, { ...init, headers });
};

const rev1 = await new ClientFactory({
  transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
  cardResolver: new DefaultAgentCardResolver({ fetchImpl: authFetch }),
}).createFromUrl(`${api}/a2a/seats/rev-1/`);
console.log(`card pushNotifications=${rev1.agentCard?.capabilities?.pushNotifications}`);

const sent = await rev1.sendMessage({
  message: { messageId: crypto.randomUUID(), role: Role.ROLE_USER, parts: [{ content: { $case: 'text', value: 'please review the API' } }] },
  configuration: { returnImmediately: true },
});
console.log(`task ${sent.id} ${TaskState[sent.status?.state]}`);

const created = await rev1.createTaskPushNotificationConfig({
  taskId: sent.id, id: 'hook-1', url: hook, token: 'hook-token',
  authentication: { scheme: 'Bearer', credentials: 'hook-secret' },
});
console.log(`created ${created.id} ${created.taskId} ${created.url} ${created.token}`);
const got = await rev1.getTaskPushNotificationConfig({ taskId: sent.id, id: 'hook-1' });
console.log(`got ${got.id} token=${got.token === '' ? 'hidden' : 'shown'} scheme=${got.authentication?.scheme}`);
const listed = await rev1.listTaskPushNotificationConfig({ taskId: sent.id });
console.log(`listed ${listed.configs.map((c) => c.id).join(',')}`);
try {
  await rev1.createTaskPushNotificationConfig({ taskId: sent.id, id: 'internal', url: 'http://10.0.0.1/hook' });
  console.log('internal: no error');
} catch (e) {
  console.log(`internal: ${e.message}`);
}
console.log('done');
