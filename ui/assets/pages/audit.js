// Audit: who did what through the API, newest first, filtered by
// principal, outcome and action, a page at a time (before: the oldest row
// id of the page shown). The filters live in the route's query, so a
// filtered view is a link: #/audit?principal=alice&outcome=denied.

import { get, query } from '../lib/api.js';
import { h, show, table, badge, when, errorBox } from '../lib/dom.js';
import { more } from '../lib/lists.js';

const page = 50;
const outcomes = ['', 'allowed', 'denied', 'failed'];

export default async function audit(main, params, ctx) {
  const f = new URLSearchParams(params[0] || '');
  const principal = h('input', { type: 'text', id: 'audit-principal', value: f.get('principal') || '', autocomplete: 'off' });
  const action = h('input', { type: 'text', id: 'audit-action', value: f.get('action') || '', placeholder: 'POST /tickets/{id}/answer', autocomplete: 'off' });
  const outcome = h('select', { id: 'audit-outcome' }, outcomes.map((o) => h('option', { value: o }, o || 'any')));
  outcome.value = f.get('outcome') || '';
  const form = h('form', { class: 'filters', on: { submit: (e) => {
    e.preventDefault();
    location.hash = '#/audit' + query({ principal: principal.value.trim(), outcome: outcome.value, action: action.value.trim() });
  } } },
  h('label', { for: 'audit-principal' }, 'Principal'), principal,
  h('label', { for: 'audit-outcome' }, 'Outcome'), outcome,
  h('label', { for: 'audit-action' }, 'Action'), action,
  h('button', { type: 'submit' }, 'Filter'));
  const rowsEl = h('tbody');
  const listEl = h('div', { id: 'audit' });
  const moreEl = h('div');
  show(main, h('h1', {}, 'Audit'), form, listEl, moreEl);

  const filter = { principal: f.get('principal'), outcome: f.get('outcome'), action: f.get('action') };
  const load = async (before) => {
    const rows = await get('/audit' + query(Object.assign({ limit: page, before }, filter)));
    if (!ctx.isCurrent()) return '';
    rowsEl.append(...rows.map(row));
    return rows.length === page ? rows[rows.length - 1].id : '';
  };
  let next;
  try {
    next = await load('');
  } catch (err) {
    show(listEl, errorBox(err));
    main.dataset.ready = 'audit';
    return null;
  }
  show(listEl, rowsEl.childElementCount
    ? h('table', {}, h('thead', {}, h('tr', {}, ['id', 'at', 'principal', 'action', 'target', 'outcome', 'reason'].map((t) => h('th', { scope: 'col' }, t)))), rowsEl)
    : table([], [], 'No audit rows match.'));
  if (next) {
    show(moreEl, more('Older rows', async () => {
      next = await load(next);
      return !!next;
    }));
  }
  main.dataset.ready = 'audit';
  return null;
}

function row(e) {
  return h('tr', { 'data-id': e.id },
    h('td', {}, String(e.id)),
    h('td', {}, when(e.at)),
    h('td', {}, e.principal, h('span', { class: 'muted' }, ' (', e.role, ')')),
    h('td', {}, h('code', {}, e.action)),
    h('td', {}, e.target || ''),
    h('td', {}, badge(e.outcome, e.outcome === 'allowed' ? 'ok' : 'bad'), ' ', h('span', { class: 'muted' }, e.status)),
    h('td', { class: 'msg' }, e.reason || '', e.request_id ? h('div', { class: 'muted' }, 'request ', e.request_id) : null));
}
