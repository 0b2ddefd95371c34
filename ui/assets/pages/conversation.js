// One conversation: its compaction summaries above, its messages oldest
// first a page at a time, and, once the reader has reached the end, the
// new messages as they are recorded. One live connection (the
// conversation's stream): its events show the turn at work, and a turn
// starting, answering or ending reads the messages after the last one
// shown.

import { get, query, APIError } from '../lib/api.js';
import { h, show, link, section, when, errorBox } from '../lib/dom.js';
import { subscribe } from '../lib/sse.js';
import { eventLog } from '../lib/events.js';

const pageSize = 100;

export default async function conversation(main, [id], ctx) {
  const base = '/conversations/' + encodeURIComponent(id);
  const summariesEl = h('div', { id: 'summaries' });
  const list = h('ol', { id: 'messages', class: 'messages' });
  const moreEl = h('div', { id: 'more' });
  const statusEl = h('div', { id: 'messages-status' });
  const streamEl = h('div', { id: 'stream', class: 'stream', role: 'log', 'aria-live': 'polite', tabindex: '0' });
  show(main,
    h('h1', {}, 'Conversation ', h('code', {}, id)),
    summariesEl,
    section('Messages', statusEl, list, moreEl),
    section('Live', streamEl));
  const log = eventLog(streamEl, { showSeat: true });

  // after is the seq of the last message shown; atEnd says no page is
  // left to read, so live growth may be read on from after. reading keeps
  // one read at a time, and again one more once it is done.
  let after = 0;
  let atEnd = false;
  let reading = null;
  let again = false;
  const readOn = async () => {
    if (reading) { again = true; return reading; }
    reading = (async () => {
      do {
        again = false;
        try {
          const v = await get(base + query({ after: after || '', limit: pageSize }));
          if (!ctx.isCurrent()) return;
          show(statusEl);
          drawSummaries(summariesEl, v.summaries || []);
          for (const m of v.messages || []) {
            if (m.seq <= after) continue;
            list.appendChild(message(m));
            after = m.seq;
          }
          atEnd = !v.next;
          show(moreEl, atEnd ? null : h('button', { type: 'button', class: 'secondary', id: 'next-page', on: { click: readOn } }, 'Newer messages'));
        } catch (err) {
          if (err instanceof APIError && err.status === 404) {
            // Not recorded yet: its first message is on its way, and the
            // stream says when it is.
            atEnd = true;
            show(statusEl, h('p', { class: 'muted' }, err.message));
          } else {
            show(statusEl, errorBox(err));
          }
        }
      } while (again && atEnd);
      reading = null;
    })();
    return reading;
  };

  const stream = subscribe(base + '/stream', {
    onEvent: ({ data }) => {
      if (!data || typeof data !== 'object') return;
      log.add(data);
      if (atEnd && (data.kind === 'turn_started' || data.kind === 'answer_sent' || data.kind === 'turn_finished')) readOn();
    },
    onState: (state, d) => ctx.live.set(state, d),
  });

  await readOn();
  main.dataset.ready = 'conversation';
  return () => stream.close();
}

function drawSummaries(el, summaries) {
  if (!summaries.length) { show(el); return; }
  show(el, section('Summary', summaries.map((s) => h('div', { class: 'summary' },
    h('p', { class: 'muted' }, 'By ', s.seat, ', covering ', String(s.covered), ' exchange', s.covered === 1 ? '' : 's',
      ' through message ', String(s.through_seq), ', ', when(s.created_at)),
    h('pre', { class: 'msg' }, s.summary)))));
}

function message(m) {
  return h('li', { class: 'message ' + m.type, 'data-seq': m.seq },
    h('div', { class: 'muted' },
      m.from === 'operator' ? 'operator' : link(m.from, 'seats', m.from), ' → ',
      m.to === 'operator' ? 'operator' : link(m.to, 'seats', m.to), ' · ', m.type, ' · ', when(m.sent_at)),
    h('pre', { class: 'msg' }, m.body));
}
