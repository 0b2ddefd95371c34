// Tickets: the open ones grouped by phase (those asking a question first),
// then the recent ones that ended, each with its chain of delegation, its
// seats linked, and what it cost with its sub-tickets (the breakdown by
// ticket under it on demand). Its delegator (or an admin) answers a question or
// cancels it here; the API decides, and says why when it refuses.

import { get, getPage, post, query } from '../lib/api.js';
import { h, show, link, section, badge, when, usd, table, errorBox } from '../lib/dom.js';
import { action, textAction, more } from '../lib/lists.js';

// GET /tickets reads newest first, a page at a time: a full page names
// the next in X-Next-Before, and "more" reads it.
const openPage = 100;
const recentPage = 50;

const openPhases = ['asking', 'pending'];
const endedPhases = ['done', 'failed', 'cancelled', 'expired'];

export default async function tickets(main, _params, ctx) {
  const openEl = h('div', { id: 'open-tickets' });
  const recentEl = h('div', { id: 'recent-tickets' });
  const countEl = h('p', { class: 'muted', id: 'ticket-count' });
  show(main,
    h('h1', {}, 'Tickets'),
    countEl,
    ctx.me.role === 'member' ? h('p', { class: 'muted' }, 'The tickets your seat opened or serves.') : null,
    section('Open', openEl),
    section('Recent', recentEl));

  // The roster says which names are seats, so only those are linked (a
  // ticket opened through the API names its person, who may have none).
  let seats = new Set();
  // Each list: the tickets read so far and the cursor of the next page.
  const lists = {
    open: { el: openEl, params: { open: true, limit: openPage }, phases: openPhases, empty: 'No open tickets.', label: 'More open tickets' },
    recent: { el: recentEl, params: { limit: recentPage }, phases: endedPhases, empty: 'No ticket ended lately.', label: 'Older tickets' },
  };
  const read = async (list, before) => {
    const { items, next } = await getPage('/tickets' + query(Object.assign({ before }, list.params)));
    // The recent list is every phase, newest first; the open ones are
    // shown above it.
    list.items = (before ? list.items : []).concat(items.filter((t) => list.phases.includes(t.phase)));
    list.next = next;
  };
  const drawList = (list) => {
    show(list.el, byPhase(list.items, list.phases, list.empty, row),
      list.next ? more(list.label, async () => {
        await read(list, list.next);
        if (ctx.isCurrent()) drawList(list);
        return false;
      }) : null);
  };
  const draw = async () => {
    await Promise.all([read(lists.open, ''), read(lists.recent, '')]);
    if (!ctx.isCurrent()) return;
    show(countEl, lists.open.items.length + (lists.open.next ? '+' : '') + ' open, ' + lists.recent.items.length + ' recently ended');
    drawList(lists.open);
    drawList(lists.recent);
  };

  const row = (t) => ticketRow(t, seats, ctx.me, draw);

  try {
    seats = new Set((await get('/seats')).map((s) => s.handle));
  } catch (err) {
    show(main, errorBox(err));
    return null;
  }
  await draw();
  main.dataset.ready = 'tickets';
  return null;
}

function byPhase(list, phases, empty, row) {
  if (!list.length) return h('p', { class: 'muted' }, empty);
  return phases.filter((p) => list.some((t) => t.phase === p)).map((p) => {
    const some = list.filter((t) => t.phase === p);
    return h('div', { class: 'phase', 'data-phase': p },
      h('h3', {}, p, h('span', { class: 'muted' }, ' · ', some.length)),
      h('ul', { class: 'tickets' }, some.map(row)));
  });
}

// mayAct mirrors who the API lets answer or cancel a ticket: its
// delegator (the seat bound to the token, or the principal that opened
// it) or an admin; never a reader.
function mayAct(t, me) {
  if (me.right === 'read') return false;
  return me.admin || me.anonymous || (!!me.seat && t.from === me.seat) || (!!t.opened_by && t.opened_by === me.name);
}

function ticketRow(t, seats, me, redraw) {
  const who = (name) => (seats.has(name) ? link(name, 'seats', name) : h('span', {}, name));
  // The chain names the delegators in order, this ticket's own last; the
  // seat serving it ends the line.
  const chain = (t.chain && t.chain.length ? t.chain : [t.from]);
  const open = openPhases.includes(t.phase);
  return h('li', { class: 'ticket', 'data-ticket': t.id, 'data-phase': t.phase },
    h('div', { class: 'head' },
      h('strong', {}, t.id), ' ', badge(t.phase, t.phase === 'asking' ? 'warn' : t.phase === 'done' ? 'ok' : t.phase === 'pending' ? '' : 'bad'),
      ' ', h('span', { class: 'chain', 'aria-label': 'chain of delegation' },
        chain.map((name, i) => [i ? ' → ' : '', who(name)]), ' → ', who(t.to)),
      t.routed_from ? h('span', { class: 'muted' }, ' (routed by role ', t.routed_from, ')') : null,
      t.hops > 1 ? h('span', { class: 'muted' }, ' · ', t.hops, ' hops') : null),
    h('div', { class: 'facts muted' },
      'opened ', when(t.created_at), t.opened_by ? [' by ', t.opened_by] : null,
      t.settled_at ? [' · ended ', when(t.settled_at)] : null,
      t.conversation ? [' · ', link('conversation', 'conversations', t.conversation)] : null),
    costLine(t),
    h('div', { class: 'msg task' }, t.task),
    t.question ? h('div', { class: 'question' }, h('strong', {}, 'Asks: '), h('span', { class: 'msg' }, t.question),
      t.asked_at ? h('span', { class: 'muted' }, ' (', when(t.asked_at), ')') : null) : null,
    t.answer ? h('div', { class: 'answer' }, h('strong', {}, 'Answer', t.answered_by ? ' from ' + t.answered_by : '', ': '), h('span', { class: 'msg' }, t.answer)) : null,
    t.reply ? h('div', { class: 'reply' }, h('strong', {}, 'Reply: '), h('span', { class: 'msg' }, t.reply)) : null,
    t.reason ? h('div', { class: 'reason' }, h('strong', {}, 'Why: '), h('span', { class: 'msg' }, t.reason)) : null,
    open && mayAct(t, me) ? h('div', { class: 'actions' },
      t.phase === 'asking' ? textAction('Answer', 'Answer to ' + t.to, async (text) => {
        await post('/tickets/' + encodeURIComponent(t.id) + '/answer', { text });
        await redraw();
      }, { required: true, multiline: true }) : null,
      textAction('Cancel ticket', 'Why cancel (optional)', async (reason) => {
        await post('/tickets/' + encodeURIComponent(t.id) + '/cancel', { reason });
        await redraw();
      }, { kind: 'secondary' })) : null);
}

// costLine is what the ticket cost, its sub-tickets' included, and a
// button that reads the breakdown: each ticket of the chain under it with
// its own cost and its total.
function costLine(t) {
  if (!t.cost) return null;
  const c = t.cost;
  const chain = h('div', { class: 'cost-chain' });
  return h('div', { class: 'cost' },
    h('span', { class: 'amount' }, 'Cost ', usd(c.nano_usd)), h('span', { class: 'muted' }, ' · ', c.rounds, ' model calls, ',
      c.input_tokens + c.output_tokens, ' tokens'),
    c.unpriced_tokens ? h('span', { class: 'error' }, ' · ', c.unpriced_tokens, ' unpriced tokens') : null,
    ' ', action('Breakdown', async () => {
      const v = await get('/tickets/' + encodeURIComponent(t.id));
      show(chain, chainTable(v.cost_chain), v.cost_chain_truncated ? h('p', { class: 'muted' }, 'Only the first tickets of a longer chain are counted.') : null);
    }, { class: 'link', 'data-action': 'breakdown' }),
    chain);
}

// chainTable lists a chain depth first, each ticket indented under the one
// it was delegated for.
function chainTable(links) {
  return table(['ticket', 'to', 'phase', 'own', 'total'], links.map((l) => [
    h('span', { 'data-link': l.ticket, 'data-depth': l.depth }, '\u00a0\u00a0'.repeat(l.depth) + (l.depth ? '└ ' : ''), l.ticket),
    l.remote ? [l.to, h('span', { class: 'muted' }, ' (remote: not counted here)')] : l.to,
    l.phase,
    usd(l.own.nano_usd) + ' · ' + l.own.rounds + ' calls',
    usd(l.total.nano_usd),
  ]));
}
