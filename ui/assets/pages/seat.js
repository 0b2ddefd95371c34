// One seat: its tenure and state, the live stream of what it does, its
// recent turns with their transcripts and charter receipts, the
// conversations it is in, its memory, its usage against its caps, its dead
// letters, and the actions the reader may take on it. One live connection
// (the seat's stream); the detail and the turns are read again when a turn
// starts or ends, not on a timer.

import { get, post, query } from '../lib/api.js';
import { h, show, link, section, table, badge, when, ago, errorBox } from '../lib/dom.js';
import { subscribe } from '../lib/sse.js';
import { eventLog } from '../lib/events.js';

const turnsShown = 20;
const memoryPage = 20;
// deadLetterScan is the one page of dead letters the page reads: they are
// the whole company's, filtered here to this seat.
const deadLetterScan = 100;
const bodyClip = 300;

export default async function seat(main, [handle], ctx) {
  if (!ctx.me.fleet && ctx.me.seat !== handle) {
    // A member reads its own seat only: asking for another's would be
    // refused, so the page does not ask.
    show(main, h('h1', {}, handle),
      h('p', { id: 'not-yours' }, 'You are signed in for seat ', ctx.me.seat || '—', ': another seat’s page needs a viewer’s or operator’s token. ',
        ctx.me.seat ? link('Your seat.', 'seats', ctx.me.seat) : null));
    main.dataset.ready = 'seat';
    return null;
  }
  const base = '/seats/' + encodeURIComponent(handle);
  // Sending takes operate (a viewer holds read only); a member's mail is
  // from its own seat, so its own page offers no send.
  const canSend = ctx.me.right !== 'read' && ctx.me.seat !== handle;
  const canSteer = ctx.me.steer;

  const titleEl = h('h1', {}, handle);
  const tenureEl = h('div', { id: 'tenure' });
  const actionsEl = h('div', { id: 'actions' });
  const streamEl = h('div', { id: 'stream', class: 'stream', role: 'log', 'aria-live': 'polite', tabindex: '0' });
  const turnsEl = h('div', { id: 'turns' });
  const convsEl = h('div', { id: 'conversations' });
  const memoryEl = h('div', { id: 'memory' });
  const usageEl = h('div', { id: 'usage' });
  const deadEl = h('div', { id: 'deadletters' });
  show(main,
    titleEl,
    tenureEl,
    actionsEl,
    section('Live', streamEl),
    section('Recent turns', turnsEl),
    section('Conversations', convsEl),
    section('Usage', usageEl),
    section('Memory', memoryEl),
    ctx.me.fleet ? section('Dead letters', deadEl) : null);

  const log = eventLog(streamEl);
  // conversations: every conversation the page has seen the seat in, by
  // id: with whom and when last.
  const conversations = new Map();
  const seen = (id, who, at) => {
    if (!id) return;
    const c = conversations.get(id) || { id, with: new Set(), at: 0 };
    if (who && who !== handle) c.with.add(who);
    c.at = Math.max(c.at, new Date(at).getTime() || 0);
    conversations.set(id, c);
  };
  const drawConversations = () => {
    const list = [...conversations.values()].sort((a, b) => b.at - a.at);
    show(convsEl, table(['conversation', 'with', 'last'], list.map((c) => [
      link(c.id, 'conversations', c.id), [...c.with].join(', ') || '—', when(c.at ? new Date(c.at) : null),
    ]), 'None in the recent turns and mail.'));
  };

  let detail = null;
  const drawDetail = async () => {
    try {
      detail = await get(base);
      if (!ctx.isCurrent()) return;
      drawTenure(titleEl, tenureEl, handle, detail);
      drawActions();
    } catch (err) {
      show(tenureEl, errorBox(err));
    }
  };
  // A person's seat runs no turns: its conversations are in its mail.
  const drawInbox = async () => {
    try {
      const mail = await get(base + '/inbox' + query({ limit: turnsShown }));
      if (!ctx.isCurrent()) return;
      for (const m of mail) seen(m.conversation, m.from === handle ? m.to : m.from, m.sent_at);
      drawConversations();
    } catch (err) {
      show(convsEl, errorBox(err));
    }
  };
  const drawTurns = async () => {
    try {
      const turns = await get(base + '/turns' + query({ limit: turnsShown }));
      if (!ctx.isCurrent()) return;
      for (const t of turns) for (const m of t.mail || []) seen(m.conversation, m.from === handle ? m.to : m.from, m.sent_at);
      // A transcript the reader opened stays open when the list is
      // read again.
      const open = new Set([...turnsEl.querySelectorAll('details[open]')].map((d) => d.dataset.workKey));
      show(turnsEl, turnsTable(handle, turns));
      for (const d of turnsEl.querySelectorAll('details')) {
        if (open.has(d.dataset.workKey)) {
          d.open = true;
          // Read now: the toggle event the line above queues is not
          // fired for a list replaced again before it runs.
          d.loadTranscript();
        }
      }
      drawConversations();
    } catch (err) {
      show(turnsEl, errorBox(err));
    }
  };

  // The actions: a message for whoever may send, the steering for who may
  // steer the fleet. A reader with neither sees none.
  const actionMsg = h('div', { id: 'action-result', role: 'status' });
  const text = h('textarea', { id: 'send-text', rows: 3, 'aria-label': 'Message to ' + handle, placeholder: 'Message to ' + handle });
  const sendForm = canSend ? h('form', { class: 'send', on: { submit: async (e) => {
    e.preventDefault();
    const body = text.value;
    if (!body.trim()) { show(actionMsg, errorBox('Write a message first.')); return; }
    await act(async () => {
      const msg = await post(base + '/messages', { text: body });
      text.value = '';
      seen(msg.conversation, msg.from || 'operator', msg.sent_at);
      drawConversations();
      log.note(h('strong', {}, 'sent'), ' by ', msg.from || 'operator', ': ', h('span', { class: 'msg sent' }, msg.body),
        ' ', link('conversation', 'conversations', msg.conversation));
      return 'Sent; the reply shows in the live stream.';
    });
  } } }, text, h('button', { type: 'submit', id: 'send' }, 'Send')) : null;
  const steer = (name, label, path, payload, confirmText) => h('button', { type: 'button', class: 'secondary', id: name, on: { click: async () => {
    if (confirmText && !window.confirm(confirmText)) return;
    await act(async () => {
      await post(base + path, payload);
      await drawDetail();
      return label + ': asked; the seat applies it at its next step.';
    });
  } } }, label);
  const act = async (fn) => {
    for (const b of actionsEl.querySelectorAll('button')) b.disabled = true;
    show(actionMsg);
    try {
      show(actionMsg, h('p', { class: 'muted' }, await fn()));
    } catch (err) {
      show(actionMsg, errorBox(err));
    } finally {
      for (const b of actionsEl.querySelectorAll('button')) b.disabled = false;
    }
  };
  function drawActions() {
    const agent = detail && detail.seat && detail.seat.Kind === 'agent';
    const buttons = canSteer && agent ? h('div', { class: 'actions' },
      steer('pause', 'Pause', '/pause', {}),
      steer('stop-turn', 'Stop turn', '/pause', { stop_turn: true, reason: 'stopped from the console' }, 'Stop the turn ' + handle + ' runs now and pause the seat?'),
      steer('resume', 'Resume', '/resume', {}),
      steer('drain', 'Drain', '/drain', { reason: 'drained from the console' }, 'Drain ' + handle + '? It finishes its turn and takes no more mail.')) : null;
    if (!sendForm && !buttons) { show(actionsEl); return; }
    show(actionsEl, section('Actions', sendForm, buttons, actionMsg));
  }

  // The live stream; a turn starting or ending changes the seat's state
  // and its list of turns, so those are read again then.
  let again = null;
  const refresh = (finished) => {
    clearTimeout(again);
    again = setTimeout(() => {
      drawDetail();
      drawTurns();
      if (finished) { drawUsageNow(); memoryView(memoryEl, base, ctx); }
    }, 300);
  };
  const drawUsageNow = () => get(base + '/usage').then((u) => ctx.isCurrent() && drawUsage(usageEl, u), (err) => show(usageEl, errorBox(err)));
  // The seat's state comes first: a turn running now is shown from its
  // start, not from the moment the page opened. Event ids are Redis stream
  // ids, milliseconds first, so the turn's start names where to read from;
  // a second earlier allows for the worker's clock and Redis's to differ.
  await drawDetail();
  const turn = detail && detail.state && detail.state.turn;
  const from = turn ? query({ last_event_id: Math.max(0, new Date(turn.started_at).getTime() - 1000) + '-0' }) : '';
  const stream = subscribe(base + '/stream' + from, {
    onEvent: ({ data }) => {
      if (!data || typeof data !== 'object') return;
      log.add(data);
      if (data.conversation && !conversations.has(data.conversation)) {
        seen(data.conversation, data.data && data.data.to, data.time);
        drawConversations();
      }
      if (data.kind === 'turn_started' || data.kind === 'turn_finished') refresh(data.kind === 'turn_finished');
    },
    onState: (state, d) => ctx.live.set(state, d),
  });

  await Promise.all([
    drawTurns(),
    drawInbox(),
    drawUsageNow(),
    memoryView(memoryEl, base, ctx),
    ctx.me.fleet ? drawDeadLetters(deadEl, handle) : null,
  ]);
  main.dataset.ready = 'seat';
  return () => { stream.close(); clearTimeout(again); };
}

function drawTenure(titleEl, el, handle, d) {
  const st = d.state;
  const row = d.row;
  const health = d.health && d.health.state;
  show(titleEl, handle, ' ',
    st ? badge(st.status) : row ? badge(row.status) : null,
    health && health !== 'unknown' ? [' ', badge(health, 'health ' + health)] : null);
  const facts = [
    ['role', d.seat.Role || '—'],
    ['kind', d.seat.Kind + (d.seat.Spawned ? ' (spawned)' : '')],
    ['node', (st && st.node) || (row && row.node) || '—'],
    ['epoch', String((st && st.epoch) || (row && row.epoch) || 0)],
    ['since', when(row && row.acquired_at)],
  ];
  if (st) {
    facts.push(['current turn', st.turn
      ? h('span', { id: 'current-turn' }, st.turn.work_key, ', ', String(st.turn.triggers), ' message', st.turn.triggers === 1 ? '' : 's', ', for ', ago(st.turn.started_at))
      : h('span', { id: 'current-turn', class: 'muted' }, 'none')]);
    facts.push(['mail waiting', String(st.queued_mail || 0)]);
    facts.push(['turns', String(st.counters.turns) + (st.counters.failures ? ', ' + st.counters.failures + ' failed' : '')]);
    if (st.pause) facts.push(['paused', hold(st.pause)]);
    if (st.drain) facts.push(['draining', hold(st.drain)]);
    if (st.budget_hold) facts.push(['held by budget', st.budget_hold.scope + ' ' + st.budget_hold.window + ' cap ' + st.budget_hold.cap + ' reached; resets ' + new Date(st.budget_hold.resets_at).toLocaleString()]);
    if (st.last_error) facts.push(['last error', h('span', { class: 'error' }, st.last_error)]);
  }
  if (d.state_error) facts.push(['live state', h('span', { class: 'error' }, d.state_error)]);
  if (d.health && d.health.cause) facts.push(['health', d.health.state + ': ' + d.health.cause]);
  const tickets = [...(d.tickets.delegated || []).map((t) => ['delegated', t]), ...(d.tickets.serving || []).map((t) => ['serving', t])];
  show(el,
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    tickets.length ? section('Open tickets', table(['', 'ticket', 'from', 'to', 'phase', 'task'], tickets.map(([way, t]) => [
      way, t.id, t.from, t.to, badge(t.phase), clip(t.task),
    ]))) : null,
    d.approvals && d.approvals.length ? section('Waiting for approval', table(['tool', 'arguments', 'approvers', 'since'], d.approvals.map((a) => [
      h('code', {}, a.tool), h('code', { class: 'args' }, clip(a.args)), (a.approvers || []).join(', '), when(a.created_at),
    ]))) : null);
}

function hold(x) {
  return ['by ', x.by || '—', x.reason ? ' (' + x.reason + ')' : '', x.stop_turn ? ', turn stopped' : '', ' since ', when(x.since)];
}

function turnsTable(handle, turns) {
  if (!turns.length) return h('p', { class: 'muted' }, 'No turns yet.');
  return h('div', { class: 'turns' }, turns.map((t) => {
    const body = h('div', { class: 'transcript' }, h('p', { class: 'muted' }, 'Loading…'));
    let loaded = false;
    const load = () => {
      if (loaded) return;
      loaded = true;
      transcript(body, handle, t.work_key, 0, true);
    };
    const details = h('details', { class: 'turn', 'data-work-key': t.work_key, on: { toggle: () => {
      if (details.open) load();
    } } },
    h('summary', {},
      when(t.started_at), ' ', badge(t.status), ' ',
      String(t.rounds), ' round', t.rounds === 1 ? '' : 's', t.profile ? ' on ' + t.profile : '', ' · ',
      (t.mail || []).map((m, i) => [i ? '; ' : '', m.from, ': ', h('span', { class: 'msg' }, clip(m.body, 120))])),
    t.note ? h('p', { class: 'muted' }, t.note, t.stopped_by ? ' (stopped by ' + t.stopped_by + ')' : '') : null,
    body);
    details.loadTranscript = load;
    return details;
  }));
}

// transcript reads one turn's messages and charter receipts into el; a
// turn too long for one answer reads on from next.
async function transcript(el, handle, workKey, from, first) {
  try {
    const v = await get('/turns/' + encodeURIComponent(handle) + '/' + encodeURIComponent(workKey) + query({ from: from || '' }));
    if (first) show(el);
    else el.querySelector('.more')?.remove();
    if (first) {
      const convs = [...new Set((v.turn.mail || []).map((m) => m.conversation).filter(Boolean))];
      el.appendChild(h('p', {}, 'Turn ', h('code', {}, v.turn.turn_id), ', epoch ', String(v.turn.epoch), ', finished ', when(v.turn.finished_at),
        convs.length ? [' · ', convs.map((c, i) => [i ? ', ' : '', link('conversation ' + c.slice(0, 8), 'conversations', c)])] : null));
      el.appendChild(section('Charter receipts', table(['round', 'profile', 'model', 'system prompt', 'tokens in / out', 'context'], (v.receipts || []).map((r) => [
        String(r.round), r.profile, r.answered_model || '—', h('code', { title: r.system_sha256 }, r.system_sha256.slice(0, 12) + '… ' + r.system_bytes + ' B'),
        r.input_tokens + ' / ' + r.output_tokens, r.context_bytes ? r.context_bytes + ' B' : '—',
      ]), 'No model call recorded.')));
      if (v.approvals && v.approvals.length) {
        el.appendChild(section('Approvals', table(['tool', 'status', 'by', 'reason'], v.approvals.map((a) => [h('code', {}, a.tool), badge(a.status), a.decided_by || '—', a.reason || '']))));
      }
      el.appendChild(h('ol', { class: 'messages' }));
    }
    const list = el.querySelector('ol.messages');
    for (const m of v.messages || []) list.appendChild(turnMessage(m));
    if (v.next) {
      el.appendChild(h('button', { type: 'button', class: 'secondary more', on: { click: () => transcript(el, handle, workKey, v.next, false) } }, 'More messages'));
    }
  } catch (err) {
    if (first) show(el, errorBox(err));
    else el.appendChild(errorBox(err));
  }
}

function turnMessage(m) {
  const msg = m.message || {};
  return h('li', { class: 'message ' + msg.role },
    h('div', { class: 'muted' }, msg.role, m.thread ? ' · thread ' + m.thread : '', m.round ? ' · round ' + m.round : '',
      msg.tool_call_id ? ' · result of ' + msg.tool_call_id : '', msg.is_error ? ' · error' : ''),
    msg.content ? h('pre', { class: 'msg' }, msg.content) : null,
    (msg.tool_calls || []).map((c) => h('div', {}, 'calls ', h('code', {}, c.name), ' ', h('code', { class: 'args' }, JSON.stringify(c.args)))));
}

function drawUsage(el, u) {
  show(el, table(['scope', 'window', 'used', 'cap', 'resets'], (u.windows || []).map((w) => [
    w.scope, w.window, String(w.used),
    w.cap ? h('span', { class: w.used >= w.cap ? 'error' : '' }, String(w.cap), w.used >= w.cap ? ' (reached)' : ' (' + Math.round(100 * w.used / w.cap) + '%)') : 'none',
    when(w.resets_at),
  ]), 'No usage.'),
  u.hold ? errorBox('Turns are held: the ' + u.hold.scope + ' ' + u.hold.window + ' cap is reached until ' + new Date(u.hold.resets_at).toLocaleString() + '.') : null);
}

// memoryView shows the first page of each memory list, and a button for
// each list's next page.
function memoryView(el, base, ctx) {
  const lists = {
    diary: { title: 'Diary', el: h('div', { id: 'memory-diary' }), row: (d) => h('li', {}, when(d.recorded_at), ' ', h('span', { class: 'msg' }, d.content)) },
    episodes: { title: 'Episodes', el: h('div', { id: 'memory-episodes' }), row: (e) => h('li', {}, when(e.recorded_at), ' ', h('span', { class: 'msg' }, e.summary)) },
    counterparties: { title: 'Counterparties', el: h('div', { id: 'memory-counterparties' }),
      row: (c) => h('li', {}, c.counterparty, ': ', String(c.interaction_count), ' interaction', c.interaction_count === 1 ? '' : 's', ', last ', when(c.last_seen)) },
  };
  show(el, h('div', { class: 'memory' }, Object.values(lists).map((l) => h('div', {}, h('h3', {}, l.title), l.el))));
  const draw = (kind, page, more) => {
    const l = lists[kind];
    let ul = l.el.querySelector('ul');
    l.el.querySelector('.more')?.remove();
    if (!more) {
      ul = h('ul', {});
      show(l.el, page.items.length ? ul : h('p', { class: 'muted' }, 'None.'));
    }
    for (const item of page.items) ul.appendChild(l.row(item));
    if (page.next) {
      l.el.appendChild(h('button', { type: 'button', class: 'secondary more', on: { click: async () => {
        try {
          const v = await get(base + '/memory' + query({ kind, before: page.next, limit: memoryPage }));
          if (ctx.isCurrent()) draw(kind, v[kind], true);
        } catch (err) {
          l.el.appendChild(errorBox(err));
        }
      } } }, 'Older'));
    }
  };
  return get(base + '/memory' + query({ limit: memoryPage })).then((v) => {
    for (const kind of Object.keys(lists)) if (v[kind]) draw(kind, v[kind], false);
  }, (err) => show(el, errorBox(err)));
}

async function drawDeadLetters(el, handle) {
  try {
    const all = await get('/deadletters' + query({ limit: deadLetterScan }));
    const mine = all.filter((d) => d.seat === handle);
    show(el, table(['when', 'reason', 'deliveries', 'from', 'message'], mine.map((d) => [
      when(d.at), d.reason, String(d.deliveries), d.message.from, h('span', { class: 'msg' }, clip(d.message.body)),
    ]), all.length ? 'None among the company’s newest ' + all.length + ' dead letters.' : 'No dead letters.'),
    mine.length ? h('p', {}, link('All dead letters', 'deadletters')) : null);
  } catch (err) {
    show(el, errorBox(err));
  }
}

function clip(s, n) {
  n = n || bodyClip;
  s = s || '';
  return s.length > n ? s.slice(0, n) + '…' : s;
}
