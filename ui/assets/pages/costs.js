// Costs: what the company's model calls cost over a range of days on its
// clock (this month so far unless the link says since= and until=), as
// charts drawn in the page as plain SVG: spend per day, the seats and the
// models that cost most, and each budget window's use of its caps. Every
// number is the API's: GET /costs by day, seat and model, and GET /usage.

import { get, query } from '../lib/api.js';
import { h, show, section, svg, usd, errorBox } from '../lib/dom.js';

// topN is how many seats and models the bar charts show.
const topN = 10;

export default async function costs(main, params, ctx) {
  const asked = new URLSearchParams(params[0] || '');
  const range = { since: asked.get('since') || '', until: asked.get('until') || '' };
  const since = h('input', { type: 'date', id: 'costs-since', value: range.since });
  const until = h('input', { type: 'date', id: 'costs-until', value: range.until });
  const form = h('form', { class: 'filters', on: { submit: (e) => {
    e.preventDefault();
    location.hash = '#/costs' + query({ since: since.value, until: until.value });
  } } },
  h('label', { for: 'costs-since' }, 'From'), since,
  h('label', { for: 'costs-until' }, 'to'), until,
  h('button', { type: 'submit' }, 'Show'));
  const totalsEl = h('p', { id: 'cost-totals' });
  const daysEl = h('div', { id: 'spend-by-day' });
  const seatsEl = h('div', { id: 'top-seats' });
  const modelsEl = h('div', { id: 'top-models' });
  const budgetEl = h('div', { id: 'budget-use' });
  show(main, h('h1', {}, 'Costs'), form, totalsEl,
    section('Spend per day', daysEl),
    h('div', { class: 'charts' }, section('Top seats', seatsEl), section('Top models', modelsEl)),
    section('Budget use', budgetEl));

  const read = (by) => get('/costs' + query(Object.assign({ by }, range)));
  let byDay;
  try {
    let bySeat, byModel;
    [byDay, bySeat, byModel] = await Promise.all([read('day'), read('seat'), read('model')]);
    if (!ctx.isCurrent()) return null;
    since.value = byDay.since;
    until.value = byDay.until;
    show(totalsEl, usd(byDay.total.nano_usd), ' from ', byDay.since, ' to ', byDay.until, ' (', byDay.timezone, '), ',
      byDay.total.rounds, ' model calls, ', byDay.total.input_tokens, ' tokens in (', byDay.total.cached_tokens, ' cached), ',
      byDay.total.output_tokens, ' out',
      byDay.total.unpriced_tokens ? h('span', { class: 'error' }, ', ', byDay.total.unpriced_tokens, ' tokens no price was found for') : null,
      h('span', { class: 'muted' }, ' · priced at ', (byDay.price_versions.length ? byDay.price_versions : [byDay.table_version]).join(', ')));
    show(daysEl, dayBars(byDay.rows));
    show(seatsEl, hBars('seats', bySeat.rows.slice(0, topN), (r) => r.nano_usd, usd, 'No spend.'));
    show(modelsEl, hBars('models', byModel.rows.slice(0, topN), (r) => r.nano_usd, usd, 'No spend.'));
  } catch (err) {
    show(totalsEl, errorBox(err));
  }
  try {
    const u = await get('/usage');
    if (!ctx.isCurrent()) return null;
    show(budgetEl, budgetBars(u.windows), h('p', { class: 'muted' }, 'Windows on ', u.timezone, '; a window with no cap shows what it used.'));
  } catch (err) {
    show(budgetEl, errorBox(err));
  }
  main.dataset.ready = 'costs';
  return null;
}

// dayBars is a column per day, its height the day's spend against the
// most spent in a day; every day of the range has one (0 when nothing was
// spent).
function dayBars(rows) {
  if (!rows.length) return h('p', { class: 'muted' }, 'No days.');
  const most = Math.max(1, ...rows.map((r) => r.nano_usd));
  const w = 18;
  const gap = 4;
  const hgt = 140;
  const axis = 30;
  const width = rows.length * (w + gap);
  return svg('svg', { class: 'chart days', role: 'img', width, height: hgt + axis, viewBox: `0 0 ${width} ${hgt + axis}`,
    'aria-label': 'Spend per day, ' + rows[0].key + ' to ' + rows[rows.length - 1].key },
  rows.map((r, i) => {
    const bh = r.nano_usd ? Math.max(1, Math.round((r.nano_usd / most) * hgt)) : 0;
    const x = i * (w + gap);
    return svg('g', { class: 'day', 'data-key': r.key, 'data-nano': r.nano_usd },
      svg('title', {}, r.key + ': ' + usd(r.nano_usd) + ', ' + r.rounds + ' calls'),
      svg('rect', { class: 'bar', x, y: hgt - bh, width: w, height: bh }),
      // The day of the month under its column, the month on the 1st.
      svg('text', { class: 'tick', x: x + w / 2, y: hgt + 12, 'text-anchor': 'middle' }, r.key.slice(8)),
      r.key.endsWith('-01') || i === 0 ? svg('text', { class: 'tick', x, y: hgt + 26 }, r.key.slice(0, 7)) : null);
  }));
}

// hBars is a horizontal bar per row, each as long as its value against the
// largest, labelled with its key and its value as fmt writes it.
function hBars(what, rows, value, fmt, empty) {
  if (!rows.length) return h('p', { class: 'muted' }, empty);
  const most = Math.max(1, ...rows.map(value));
  const label = 160;
  const bar = 300;
  const line = 22;
  const width = label + bar + 110;
  return svg('svg', { class: 'chart bars', role: 'img', width, height: rows.length * line, viewBox: `0 0 ${width} ${rows.length * line}`,
    'aria-label': 'Top ' + what + ' by spend' },
  rows.map((r, i) => {
    const v = value(r);
    const y = i * line;
    return svg('g', { class: 'row', 'data-key': r.key, 'data-value': v },
      svg('text', { class: 'label', x: label - 6, y: y + 15, 'text-anchor': 'end' }, r.key || '(none)'),
      svg('rect', { class: 'bar', x: label, y: y + 3, width: v ? Math.max(1, Math.round((v / most) * bar)) : 0, height: line - 6 }),
      svg('text', { class: 'value', x: label + bar + 6, y: y + 15 }, fmt(v)));
  }));
}

// budgetBars shows each usage window against its caps: tokens, and money
// when the window has a money cap (cap_nano_usd). A bar is the share of
// the cap used, full and marked at or past it.
function budgetBars(windows) {
  if (!windows || !windows.length) return h('p', { class: 'muted' }, 'No windows.');
  const meters = [];
  for (const w of windows) {
    meters.push({ key: w.scope + ' ' + w.window + ' tokens', used: w.used, cap: w.cap, text: (n) => String(n) });
    if (w.cap_nano_usd > 0) {
      meters.push({ key: w.scope + ' ' + w.window + ' money', used: w.used_nano_usd || 0, cap: w.cap_nano_usd, text: usd });
    }
  }
  const label = 200;
  const bar = 300;
  const line = 22;
  const width = label + bar + 200;
  return svg('svg', { class: 'chart budget', role: 'img', width, height: meters.length * line, viewBox: `0 0 ${width} ${meters.length * line}`,
    'aria-label': 'Budget use per window' },
  meters.map((m, i) => {
    const y = i * line;
    const share = m.cap > 0 ? Math.min(1, m.used / m.cap) : 0;
    const over = m.cap > 0 && m.used >= m.cap;
    return svg('g', { class: 'meter' + (over ? ' over' : ''), 'data-key': m.key, 'data-used': m.used, 'data-cap': m.cap },
      svg('text', { class: 'label', x: label - 6, y: y + 15, 'text-anchor': 'end' }, m.key),
      svg('rect', { class: 'track', x: label, y: y + 3, width: bar, height: line - 6 }),
      svg('rect', { class: 'bar', x: label, y: y + 3, width: Math.round(share * bar), height: line - 6 }),
      svg('text', { class: 'value', x: label + bar + 6, y: y + 15 },
        m.text(m.used) + (m.cap > 0 ? ' of ' + m.text(m.cap) + ' (' + Math.round((m.used / m.cap) * 100) + '%)' : ', no cap')));
  }));
}
