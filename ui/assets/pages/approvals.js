// Approvals: the gated tool calls waiting for a person, each with its tool,
// its arguments (as text: the model wrote them), the seat and the
// conversation. Whoever the policy names, or an admin, approves (and may
// remember it for a while), or denies with a reason the model is told.

import { get, post, query } from '../lib/api.js';
import { h, show, link, section, badge, when, errorBox } from '../lib/dom.js';
import { action, textAction } from '../lib/lists.js';

// GET /approvals answers at most 200 (wire.MaxApprovals); the pending
// queue is read whole up to that, the decided ones a page at a time.
const pendingPage = 200;
const decidedPage = 20;

// How long an approve-and-remember grant holds, for the reader to choose.
const grants = [['1 hour', 3600], ['8 hours', 8 * 3600], ['1 day', 86400], ['7 days', 7 * 86400]];

// tokenRoles rank the roles a policy may name: a token of a role at least
// the one named may decide (internal/approvals May).
const tokenRoles = ['viewer', 'operator', 'admin'];

export default async function approvals(main, _params, ctx) {
  const pendingEl = h('div', { id: 'pending-approvals' });
  const decidedEl = h('div', { id: 'decided-approvals' });
  const countEl = h('p', { class: 'muted', id: 'approval-count' });
  show(main,
    h('h1', {}, 'Approvals'),
    countEl,
    section('Waiting for a decision', pendingEl),
    section('Decided lately', decidedEl));

  let roster = new Map();
  const draw = async () => {
    const [pending, decided] = await Promise.all([
      get('/approvals' + query({ limit: pendingPage })),
      get('/approvals' + query({ status: 'all', limit: decidedPage })),
    ]);
    if (!ctx.isCurrent()) return;
    show(countEl, pending.length + (pending.length === pendingPage ? '+' : '') + ' waiting');
    show(pendingEl, pending.length
      ? h('ul', { class: 'approvals' }, pending.map((a) => pendingRow(a, roster, ctx.me, draw)))
      : h('p', { class: 'muted' }, 'Nothing waits for a decision.'));
    const done = decided.filter((a) => a.status !== 'pending');
    show(decidedEl, done.length
      ? h('ul', { class: 'approvals' }, done.map((a) => decidedRow(a, roster)))
      : h('p', { class: 'muted' }, 'None decided lately.'));
  };

  try {
    roster = new Map((await get('/seats')).map((s) => [s.handle, s]));
  } catch (err) {
    show(main, errorBox(err));
    return null;
  }
  await draw();
  main.dataset.ready = 'approvals';
  return null;
}

// mayDecide mirrors the API's rule so the buttons show only to whom they
// work: an admin, a token whose role is at least one the policy names, the
// seat the token is bound to or that seat's role:R. A member's list holds
// only what it may decide.
function mayDecide(a, roster, me) {
  if (me.admin || me.anonymous || me.role === 'member') return true;
  const rank = tokenRoles.indexOf(me.role);
  const seat = me.seat ? roster.get(me.seat) : null;
  return (a.approvers || []).some((name) => {
    if (name.startsWith('role:')) return !!seat && seat.role === name.slice(5);
    const i = tokenRoles.indexOf(name);
    if (i >= 0) return rank >= i;
    return !!me.seat && name === me.seat;
  });
}

function seatLink(handle, roster) {
  return roster.has(handle) ? link(handle, 'seats', handle) : h('span', {}, handle);
}

function facts(a, roster) {
  return h('dl', { class: 'facts' },
    h('dt', {}, 'seat'), h('dd', {}, seatLink(a.handle, roster), a.role ? h('span', { class: 'muted' }, ' (', a.role, ')') : null),
    h('dt', {}, 'conversation'), h('dd', {}, a.conversation ? link(a.conversation, 'conversations', a.conversation) : h('span', { class: 'muted' }, 'not recorded')),
    h('dt', {}, 'policy'), h('dd', {}, a.policy, ' · decided by ', (a.approvers || []).join(', ') || 'admins'),
    h('dt', {}, 'asked'), h('dd', {}, when(a.created_at)));
}

function argsText(args) {
  // Pretty-print JSON arguments for reading; anything else as it came.
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args || '';
  }
}

function pendingRow(a, roster, me, redraw) {
  const base = '/approvals/' + encodeURIComponent(a.id);
  const grant = h('select', { 'aria-label': 'remember for' }, grants.map(([label, s]) => h('option', { value: s }, label)));
  const argsOnly = h('input', { type: 'checkbox', checked: true, id: 'args-' + a.id });
  return h('li', { class: 'approval', 'data-approval': a.id },
    h('div', { class: 'head' }, h('strong', {}, a.tool), ' ', badge('pending', 'warn'),
      ' ', h('span', { class: 'muted' }, a.id, ' · times out ', when(a.until), ' (then ', a.on_timeout, ')')),
    facts(a, roster),
    h('pre', { class: 'args', 'aria-label': 'arguments' }, argsText(a.args)),
    mayDecide(a, roster, me) ? h('div', { class: 'actions' },
      action('Approve', async () => { await post(base + '/approve', {}); await redraw(); }, { 'data-action': 'approve' }),
      h('span', { class: 'remember' },
        action('Approve and remember', async () => {
          const until = new Date(Date.now() + Number(grant.value) * 1000).toISOString();
          await post(base + '/approve', { remember: { args: argsOnly.checked, until } });
          await redraw();
        }, { class: 'secondary', 'data-action': 'remember' }),
        ' for ', grant, ' ', argsOnly, h('label', { for: argsOnly.id }, ' these arguments only')),
      textAction('Deny', 'Reason (the model is told it)', async (reason) => {
        await post(base + '/deny', { reason });
        await redraw();
      }, { required: true, kind: 'secondary' }))
      : h('p', { class: 'muted' }, 'Only ', (a.approvers || []).join(', ') || 'an admin', ' or an admin may decide it.'));
}

function decidedRow(a, roster) {
  return h('li', { class: 'approval', 'data-approval': a.id, 'data-status': a.status },
    h('div', { class: 'head' }, h('strong', {}, a.tool), ' ', badge(a.status, a.status === 'approved' ? 'ok' : 'bad'),
      ' ', h('span', { class: 'muted' }, 'by ', a.decided_by || '—', ' ', when(a.decided_at))),
    a.reason ? h('div', {}, h('strong', {}, 'Why: '), h('span', { class: 'msg' }, a.reason)) : null,
    a.remember_until ? h('div', { class: 'muted' }, 'Remembered until ', when(a.remember_until), a.remember_args ? ', these arguments only' : '') : null,
    facts(a, roster),
    h('pre', { class: 'args' }, argsText(a.args)));
}
