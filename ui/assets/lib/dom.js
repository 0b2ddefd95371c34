// DOM building for the console. Every string goes into the page as a text
// node or an attribute value, never as markup: message text, tool results
// and seat names are untrusted, and this is the one way the console puts
// them on the page.

// h makes an element. attrs: plain attributes (class, href, id, aria-*,
// data-*, type, ...), `on` for event listeners ({click: fn}), and
// properties for `value`, `checked` and `disabled`. children: strings and
// numbers (as text), nodes, arrays of them; null, undefined and false are
// skipped.
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'on') {
      for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
    } else if (k === 'value' || k === 'checked' || k === 'disabled') {
      el[k] = v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// show replaces el's children.
export function show(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// link is an in-console link to a hash route; its parts are encoded, so a
// name cannot change the route.
export function link(text, ...parts) {
  return h('a', { href: route(...parts) }, text);
}

export function route(...parts) {
  return '#/' + parts.map((p) => encodeURIComponent(p)).join('/');
}

// when shows a time as the reader's local time, with the ISO form on hover.
export function when(t) {
  if (!t) return h('span', { class: 'muted' }, '—');
  const d = new Date(t);
  return h('time', { datetime: d.toISOString(), title: d.toISOString() }, d.toLocaleString());
}

// ago is how long since t, coarsely ("3m", "2h").
export function ago(t) {
  const s = Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 60) return s + 's';
  if (s < 3600) return Math.round(s / 60) + 'm';
  if (s < 86400) return Math.round(s / 3600) + 'h';
  return Math.round(s / 86400) + 'd';
}

export function badge(text, kind) {
  return h('span', { class: 'badge ' + (kind || text || '') }, text);
}

// section is a titled block of a page.
export function section(title, ...children) {
  return h('section', { class: 'block' }, h('h2', {}, title), ...children);
}

// table makes a table from column headings and rows of cells.
export function table(heads, rows, empty) {
  if (!rows.length) return h('p', { class: 'muted' }, empty || 'None.');
  return h('table', {},
    h('thead', {}, h('tr', {}, heads.map((t) => h('th', { scope: 'col' }, t)))),
    h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((c) => h('td', {}, c))))));
}

// errorBox says what went wrong: the API's own words, never a stack.
export function errorBox(err) {
  return h('p', { class: 'error', role: 'alert' }, err && err.message ? err.message : String(err));
}

// svg makes an SVG element, as h makes an HTML one: attributes set as
// values, children as text or nodes, never markup.
export function svg(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

// usd shows an amount in nano-dollars as dollars: cents once it is worth
// a cent, else enough digits to tell small amounts apart.
export function usd(nano) {
  const d = (nano || 0) / 1e9;
  if (d === 0) return '$0';
  return '$' + (Math.abs(d) >= 0.01 ? d.toFixed(2) : d.toPrecision(3));
}
