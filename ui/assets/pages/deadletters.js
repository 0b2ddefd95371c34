// Dead letters: mail no seat could take, newest first, a page at a time
// (the API names the next page in X-Next-Before). Who may steer requeues a
// letter to its seat; its body is the sender's text, shown as text.

import { getPage, post, query } from '../lib/api.js';
import { h, show, link, badge, when } from '../lib/dom.js';
import { action, more } from '../lib/lists.js';

const page = 50;

export default async function deadletters(main, _params, ctx) {
  const listEl = h('ul', { id: 'deadletters', class: 'letters' });
  const emptyEl = h('p', { class: 'muted' });
  const moreEl = h('div');
  show(main, h('h1', {}, 'Dead letters'), emptyEl, listEl, moreEl);

  const load = async (before) => {
    const { items, next } = await getPage('/deadletters' + query({ limit: page, before }));
    if (!ctx.isCurrent()) return '';
    listEl.append(...items.map((d) => letter(d, ctx.me)));
    show(emptyEl, listEl.childElementCount ? null : 'No dead letters.');
    return next;
  };
  let next = await load('');
  const pager = () => (next ? more('Older dead letters', async () => {
    next = await load(next);
    return !!next;
  }) : null);
  show(moreEl, pager());
  main.dataset.ready = 'deadletters';
  return null;
}

function letter(d, me) {
  const m = d.message || {};
  const said = h('span', { class: 'muted' });
  return h('li', { class: 'letter', 'data-id': d.id },
    h('div', { class: 'head' },
      h('strong', {}, d.id), ' to ', link(d.seat, 'seats', d.seat), ' ', badge(d.reason, 'bad'),
      d.archived ? [' ', badge('archived')] : null,
      ' ', h('span', { class: 'muted' }, d.deliveries, ' deliveries · ', when(d.at))),
    h('div', { class: 'facts muted' }, m.type || 'message', ' from ', m.from || '—',
      m.conversation ? [' · ', link('conversation', 'conversations', m.conversation)] : null,
      m.sent_at ? [' · sent ', when(m.sent_at)] : null),
    h('pre', { class: 'msg' }, m.body || ''),
    me.steer ? h('div', { class: 'actions' }, action('Requeue', async () => {
      await post('/deadletters/' + encodeURIComponent(d.id) + '/requeue', {});
      show(said, 'Requeued to ', d.seat, '.');
    }, { 'data-action': 'requeue' }), said) : null);
}
