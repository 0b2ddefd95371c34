// Schedules: the org's schedules as Temporal runs them (spec, target,
// paused, fires, skips, next fires), and one schedule's recent fires at
// #/schedules/NAME. Who may steer fires, pauses and unpauses them here.

import { get, post, query } from '../lib/api.js';
import { h, show, link, section, table, badge, when, errorBox } from '../lib/dom.js';
import { action, textAction } from '../lib/lists.js';

// The fires a detail shows (the API's most is wire.MaxScheduleFires).
const fires = 20;

export default async function schedules(main, params, ctx) {
  const name = params[0];
  if (name) return detail(main, name, ctx);
  const listEl = h('div', { id: 'schedules' });
  show(main, h('h1', {}, 'Schedules'), listEl);
  const list = await get('/schedules');
  if (!ctx.isCurrent()) return null;
  show(listEl, table(['schedule', 'when', 'to', 'state', 'fires', 'skipped', 'next'], list.map((s) => [
    link(s.name, 'schedules', s.name),
    spec(s),
    link(s.to, 'seats', s.to),
    state(s),
    String(s.fires),
    String(s.skipped) + (s.missed_catchup ? ' (+' + s.missed_catchup + ' missed)' : ''),
    s.next_fires && s.next_fires.length ? when(s.next_fires[0]) : h('span', { class: 'muted' }, '—'),
  ]), 'The org has no schedules.'));
  main.dataset.ready = 'schedules';
  return null;
}

function spec(s) {
  return [s.cron ? 'cron ' + s.cron : 'every ' + s.every, ' ', h('span', { class: 'muted' }, s.timezone,
    s.jitter ? ', jitter ' + s.jitter : '', ', overlap ', s.overlap)];
}

function state(s) {
  if (s.error) return h('span', { class: 'error' }, s.error);
  return [s.paused ? badge('paused') : badge('running'), s.note ? h('div', { class: 'muted' }, s.note) : null];
}

async function detail(main, name, ctx) {
  const el = h('div', { id: 'schedule' });
  show(main, h('p', {}, link('← Schedules', 'schedules')), h('h1', {}, 'Schedule ', name), el);
  const path = '/schedules/' + encodeURIComponent(name);
  const draw = async () => {
    const s = await get(path + query({ limit: fires }));
    if (!ctx.isCurrent()) return;
    show(el,
      h('dl', { class: 'facts' },
        h('dt', {}, 'when'), h('dd', {}, spec(s)),
        h('dt', {}, 'to'), h('dd', {}, link(s.to, 'seats', s.to)),
        h('dt', {}, 'state'), h('dd', {}, state(s)),
        h('dt', {}, 'fires'), h('dd', {}, String(s.fires), ' started, ', String(s.skipped), ' skipped for overlap, ', String(s.missed_catchup), ' missed'),
        h('dt', {}, 'catch-up window'), h('dd', {}, s.catchup_window),
        h('dt', {}, 'temporal id'), h('dd', {}, s.id),
        h('dt', {}, 'next'), h('dd', {}, (s.next_fires || []).map((t, i) => [i ? ', ' : '', when(t)]))),
      ctx.me.steer ? h('div', { class: 'actions' },
        action('Fire now', async () => { await post(path + '/trigger', {}); await draw(); }, { 'data-action': 'trigger' }),
        s.paused
          ? textAction('Unpause', 'Note (optional)', async (reason) => { await post(path + '/unpause', { reason }); await draw(); })
          : textAction('Pause', 'Why pause (optional)', async (reason) => { await post(path + '/pause', { reason }); await draw(); }, { kind: 'secondary' }))
        : null,
      section('Message', h('pre', { class: 'msg' }, s.text)),
      section('Running', (s.running || []).length ? h('ul', {}, s.running.map((id) => h('li', {}, id))) : h('p', { class: 'muted' }, 'No fire is running.')),
      section('Recent fires (Temporal)', table(['for', 'started', 'workflow'], (s.recent || []).map((r) => [
        when(r.scheduled_at), when(r.started_at), r.workflow_id,
      ]), 'No fire yet.')),
      section('Fires recorded', table(['for', 'seat', 'fired', 'answered', 'skipped before'], (s.history || []).map((f) => [
        when(f.fire_time), link(f.seat, 'seats', f.seat), when(f.fired_at),
        f.handled_at ? when(f.handled_at) : h('span', { class: 'muted' }, 'not yet'), String(f.skipped_before),
      ]), 'No fire recorded.')));
  };
  try {
    await draw();
  } catch (err) {
    show(el, errorBox(err));
  }
  main.dataset.ready = 'schedule';
  return null;
}
