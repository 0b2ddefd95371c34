// An A2A client nobody at crewlet wrote: @a2a-js/sdk's, driven as its
// README drives it. TestA2AClientFromNPM (a2a_test.go) runs it from the
// folder npm installed the SDK into and reads what it prints, one line a
// step. The bearer token comes in A2A_TOKEN, never on the command line.
import { ClientFactory, DefaultAgentCardResolver, JsonRpcTransportFactory } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const api = process.env.A2A_API;
const token = process.env.A2A_TOKEN;

const authFetch = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('Authorization', 'Bearer ' + token);
  return fetch(url, { ...init, headers });
};

const clientOf = (base) =>
  new ClientFactory({
    transports: [new JsonRpcTransportFactory({ fetchImpl: authFetch })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl: authFetch }),
  }).createFromUrl(base);

const message = (text) => ({
  messageId: crypto.randomUUID(),
  role: Role.ROLE_USER,
  parts: [{ content: { $case: 'text', value: text } }],
});

const textOf = (parts) => (parts ?? []).map((p) => (p.content?.$case === 'text' ? p.content.value : '?')).join(' ');
const stateOf = (status) => TaskState[status?.state];

// line prints one event of a stream.
const line = (prefix, ev) => {
  const p = ev.payload;
  switch (p?.$case) {
    case 'task':
      return `${prefix} task ${p.value.id} ${stateOf(p.value.status)} ${textOf(p.value.artifacts?.[0]?.parts)}`.trimEnd();
    case 'statusUpdate':
      return `${prefix} status ${p.value.taskId} ${stateOf(p.value.status)} ${textOf(p.value.status?.message?.parts)}`.trimEnd();
    case 'artifactUpdate':
      return `${prefix} artifact ${p.value.taskId} ${p.value.artifact.artifactId} ${textOf(p.value.artifact.parts)}`;
    default:
      return `${prefix} other ${JSON.stringify(ev)}`;
  }
};

const eng2 = await clientOf(`${api}/a2a/seats/eng-2/`);
console.log(`card ${eng2.agentCard?.name ?? ''} streaming=${eng2.agentCard?.capabilities?.streaming}`);

// Send, and wait for the answer (SendMessage blocks by default).
const sent = await eng2.sendMessage({ message: message('please fix the login') });
console.log(`send ${sent.id} ${stateOf(sent.status)} ${textOf(sent.artifacts?.[0]?.parts)}`);
const got = await eng2.getTask({ id: sent.id });
console.log(`get ${got.id} ${stateOf(got.status)} ${textOf(got.artifacts?.[0]?.parts)}`);

// Stream one to the end.
for await (const ev of eng2.sendMessageStream({ message: message('please fix the stream') })) {
  console.log(line('stream', ev));
}

// eng-3 is paused: its tasks wait. Cancel one.
const eng3 = await clientOf(`${api}/a2a/seats/eng-3/`);
const waiting = await eng3.sendMessage({ message: message('please fix the held one'), configuration: { returnImmediately: true } });
console.log(`held ${waiting.id} ${stateOf(waiting.status)}`);
const cancelled = await eng3.cancelTask({ id: waiting.id });
console.log(`cancel ${cancelled.id} ${stateOf(cancelled.status)}`);
try {
  await eng3.cancelTask({ id: waiting.id });
  console.log('cancel again: no error');
} catch (e) {
  console.log(`cancel again: ${e.name}`);
}

// eng-1 is paused too. Stream a task to it, drop the connection after
// the first event, subscribe again, let eng-1 go on, and read the rest.
const eng1 = await clientOf(`${api}/a2a/seats/eng-1/`);
const drop = new AbortController();
let dropped;
try {
  for await (const ev of eng1.sendMessageStream({ message: message('please fix the dropped one') }, { signal: drop.signal })) {
    dropped = ev.payload.value.id;
    console.log(line('before-drop', ev));
    drop.abort();
    break;
  }
} catch (e) {
  if (e.name !== 'AbortError') throw e;
}
let resumed = false;
for await (const ev of eng1.resubscribeTask({ id: dropped })) {
  console.log(line('resubscribed', ev));
  if (!resumed) {
    resumed = true;
    const res = await authFetch(`${api}/seats/eng-1/resume`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    console.log(`resume eng-1 ${res.status}`);
  }
}
// rev-1 asks a question: the task is input-required until the client's
// message on it answers, and then completes.
const rev1 = await clientOf(`${api}/a2a/seats/rev-1/`);
const asked = await rev1.sendMessage({ message: message('please review the API') });
console.log(`asked ${asked.id} ${stateOf(asked.status)} ${textOf(asked.status?.message?.parts)}`);
const answered = await rev1.sendMessage({ message: { ...message('the auth part'), taskId: asked.id, contextId: asked.contextId } });
console.log(`answered ${answered.id} ${stateOf(answered.status)} ${textOf(answered.artifacts?.[0]?.parts)}`);

try {
  await eng1.getTask({ id: 't-000000000000' });
} catch (e) {
  console.log(`get unknown: ${e.name}`);
}
console.log('done');
