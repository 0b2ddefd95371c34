// The company on one page: seats grouped by role as an org chart, each
// with its status, health, the turn it runs and the mail waiting for it;
// the nodes with their seats and fair share; the model profiles; the
// company's token use. One request per part; the seats are read again
// every refreshEvery, one request for the whole company.

import { get } from '../lib/api.js';
import { h, show, link, section, table, badge, ago, errorBox } from '../lib/dom.js';

const refreshEvery = 10000;

export default async function company(main, _params, ctx) {
  const seatsEl = h('div', { id: 'seats', class: 'org' });
  const nodesEl = h('div', { id: 'nodes' });
  const profilesEl = h('div', { id: 'profiles' });
  const usageEl = h('div', { id: 'usage' });
  const countEl = h('p', { class: 'muted', id: 'seat-count' });
  show(main,
    h('h1', {}, 'Company'),
    countEl,
    section('Seats', seatsEl),
    ctx.me.fleet ? section('Budget', usageEl) : null,
    ctx.me.fleet ? section('Nodes', nodesEl) : null,
    ctx.me.fleet ? section('Profiles', profilesEl) : null);

  const drawSeats = async () => {
    try {
      const seats = await get('/seats');
      if (!ctx.isCurrent()) return;
      drawOrg(seatsEl, countEl, seats);
    } catch (err) {
      show(seatsEl, errorBox(err));
    }
  };
  const parts = [drawSeats()];
  if (ctx.me.fleet) {
    parts.push(get('/usage').then((u) => drawUsage(usageEl, u), (err) => show(usageEl, errorBox(err))));
    parts.push(get('/nodes').then((n) => drawNodes(nodesEl, n), (err) => show(nodesEl, errorBox(err))));
    parts.push(get('/profiles').then((p) => drawProfiles(profilesEl, p), (err) => show(profilesEl, errorBox(err))));
  }
  await Promise.all(parts);
  main.dataset.ready = 'company';
  // When the page became usable, for anyone timing it (the benchmark
  // reads it): every part drawn, server time included.
  performance.mark('crewlet:ready:company');
  const timer = setInterval(drawSeats, refreshEvery);
  return () => clearInterval(timer);
}

function drawOrg(el, countEl, seats) {
  const byRole = new Map();
  const counts = {};
  for (const s of seats) {
    const role = s.kind === 'human' ? 'people' : (s.role || 'no role');
    if (!byRole.has(role)) byRole.set(role, []);
    byRole.get(role).push(s);
    counts[s.status] = (counts[s.status] || 0) + 1;
  }
  show(countEl, seats.length + ' seats: ' + Object.entries(counts).map(([k, v]) => v + ' ' + k).join(', '));
  const roles = [...byRole.keys()].sort((a, b) => (a === 'people') - (b === 'people') || a.localeCompare(b));
  show(el, roles.map((role) => h('div', { class: 'role' },
    h('h3', {}, role, h('span', { class: 'muted' }, ' · ', byRole.get(role).length)),
    h('ul', { class: 'seats' }, byRole.get(role).map(seatCard)))));
}

function seatCard(s) {
  return h('li', { class: 'seat', 'data-handle': s.handle, 'data-status': s.status },
    link(s.handle, 'seats', s.handle),
    ' ', badge(s.status),
    s.health && s.health !== 'unknown' ? [' ', badge(s.health, 'health ' + s.health)] : null,
    s.spawned ? [' ', badge('spawned', 'spawned')] : null,
    h('div', { class: 'facts' },
      s.turn ? h('span', { class: 'turn' }, 'turn ', ago(s.turn_since)) : null,
      s.waiting ? h('span', { class: 'waiting' }, s.waiting + ' waiting') : null,
      s.node ? h('span', { class: 'muted' }, s.node) : null));
}

function drawUsage(el, u) {
  show(el, table(['window', 'used', 'cap', 'resets'], u.windows.map((w) => [
    w.window, String(w.used), w.cap ? String(w.cap) + (w.used >= w.cap ? ' (reached)' : '') : 'none', new Date(w.resets_at).toLocaleString(),
  ]), 'No usage.'), h('p', { class: 'muted' }, 'Timezone ', u.timezone));
}

function drawNodes(el, v) {
  const shares = (fs) => Object.entries(fs || {}).map(([g, n]) => (g || 'default') + ' ' + n).join(', ');
  show(el, table(['node', 'build', 'live', 'seats', 'fair share', 'heartbeat'], v.nodes.map((n) => [
    n.node_id, n.build_id || '—', n.draining ? badge('draining') : n.live ? badge('live') : badge('gone'),
    h('span', { title: (n.seats_held || []).join(', ') }, String((n.seats_held || []).length)),
    shares(n.fair_share), Math.round(n.heartbeat_age_seconds) + 's ago',
  ]), 'No live node.'),
  v.unplaceable && v.unplaceable.length ? h('p', { class: 'error' }, 'No live node can run: ', v.unplaceable.join(', ')) : null);
}

function drawProfiles(el, v) {
  show(el, table(['profile', 'model', 'load', 'free', 'state'], v.profiles.map((p) => [
    p.name, p.model && p.model !== p.provider ? p.provider + ' ' + p.model : p.provider,
    String(p.live) + (p.max_load !== null && p.max_load !== undefined ? ' / ' + p.max_load : ''),
    p.free === null || p.free === undefined ? '∞' : String(p.free),
    p.disabled ? badge('disabled') : p.quarantine ? badge('quarantined', 'bad') : p.cooling_off ? badge('cooling off', 'warn') : badge('ok'),
  ]), 'No profiles.'));
}
