// The console's shell: sign-in, the page list, and the hash router. Each
// page is a module under pages/ whose default export renders into <main>
// and returns what stops its live parts when the reader leaves.

import { get, token, APIError } from './lib/api.js';
import { h, show, errorBox } from './lib/dom.js';

// pages: each route's pattern (its groups are the page's params), its
// module, its name in the page list (none for pages reached by a link), and
// what the reader must hold to see it: fleet (read the whole company) or
// admin.
const pages = [
  { path: /^company$/, load: () => import('./pages/company.js'), nav: 'Company', href: 'company' },
  { path: /^seats\/([^/]+)$/, load: () => import('./pages/seat.js') },
  { path: /^conversations\/([^/]+)$/, load: () => import('./pages/conversation.js') },
  { path: /^tickets$/, load: () => import('./pages/tickets.js'), nav: 'Tickets', href: 'tickets' },
  { path: /^approvals$/, load: () => import('./pages/approvals.js'), nav: 'Approvals', href: 'approvals' },
  { path: /^schedules(?:\/(.+))?$/, load: () => import('./pages/schedules.js'), nav: 'Schedules', href: 'schedules', fleet: true },
  { path: /^evals(?:\/(.+))?$/, load: () => import('./pages/evals.js'), nav: 'Evals', href: 'evals', fleet: true },
  { path: /^costs(?:\?(.*))?$/, load: () => import('./pages/costs.js'), nav: 'Costs', href: 'costs', fleet: true },
  { path: /^deadletters$/, load: () => import('./pages/deadletters.js'), nav: 'Dead letters', href: 'deadletters', fleet: true },
  { path: /^audit(?:\?(.*))?$/, load: () => import('./pages/audit.js'), nav: 'Audit', href: 'audit', admin: true },
];

const main = document.getElementById('main');
const liveEl = document.getElementById('live');
let me = null;
let leave = null;
let shown = 0;

// live tells the reader whether the page's stream is connected.
const live = {
  set(state, detail) {
    liveEl.className = 'live ' + state;
    show(liveEl, state === 'live' ? 'live' : state === 'connecting' ? 'connecting…' : 'disconnected' + (detail ? ': ' + detail : ''));
  },
  clear() { liveEl.className = 'live'; show(liveEl); },
};

function signIn(problem) {
  me = null;
  show(document.getElementById('nav'));
  show(document.getElementById('who'));
  const input = h('input', { id: 'token', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'token-help' });
  const form = h('form', { class: 'signin', on: { submit: (e) => {
    e.preventDefault();
    token.set(input.value.trim());
    start();
  } } },
  h('h1', {}, 'Sign in'),
  problem ? errorBox(problem) : null,
  h('label', { for: 'token' }, 'API token'),
  input,
  h('p', { id: 'token-help', class: 'muted' }, 'The token your operator gave you (auth.tokens in the org file); on the API\'s own machine, `crewlet console` prints a sign-in link. It is kept in this tab only.'),
  h('button', { type: 'submit' }, 'Sign in'));
  show(main, form);
  input.focus();
}

function allowed(page) {
  return (!page.fleet || me.fleet) && (!page.admin || me.admin);
}

function drawChrome() {
  show(document.getElementById('nav'), pages
    .filter((p) => p.nav && allowed(p))
    .map((p) => h('a', { href: '#/' + p.href, 'data-page': p.href }, p.nav)));
  const who = me.anonymous ? 'anyone on this machine (auth.anonymous)' : me.name + ' (' + me.role + (me.seat ? ' of ' + me.seat : '') + ')';
  show(document.getElementById('who'), who, ' ',
    me.anonymous ? null : h('button', { type: 'button', class: 'link', on: { click: () => { token.clear(); signIn(); } } }, 'Sign out'));
}

async function route() {
  if (!me) return;
  if (leave) { try { leave(); } catch { /* a page's teardown must not stop the next */ } leave = null; }
  live.clear();
  const path = decodeURIComponent(location.hash.replace(/^#\/?/, '')) || 'company';
  for (const a of document.querySelectorAll('#nav a')) {
    if (path.startsWith(a.dataset.page)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const page = pages.find((p) => p.path.test(path));
  const n = ++shown;
  if (!page || !allowed(page)) {
    show(main, h('h1', {}, 'Not here'), h('p', {}, 'No page ', path, ' that you may see. ', h('a', { href: '#/company' }, 'Go to the company.')));
    return;
  }
  show(main, h('p', { class: 'muted' }, 'Loading…'));
  try {
    const mod = await page.load();
    if (n !== shown) return;
    const params = path.match(page.path).slice(1);
    const cleanup = await mod.default(main, params, { me, live, isCurrent: () => n === shown });
    if (n !== shown) { if (cleanup) cleanup(); return; }
    leave = cleanup || null;
    main.focus({ preventScroll: true });
  } catch (err) {
    if (n !== shown) return;
    if (err instanceof APIError && err.status === 401) { signIn(err); return; }
    show(main, errorBox(err));
  }
}

async function start() {
  try {
    me = await get('/me');
  } catch (err) {
    if (err instanceof APIError && err.status === 401) {
      signIn(token.get() ? err : null);
      return;
    }
    show(main, errorBox(err));
    return;
  }
  drawChrome();
  route();
}

// A sign-in link (`crewlet console`, or the line `crewlet serve` prints on
// its terminal) carries the token in the URL fragment, which the browser
// never sends to a server. It moves into this tab's storage and leaves the
// address bar and the history at once, so the link is good for one sign-in
// of one tab and a shared screen or bookmark does not carry it.
function takeSignInLink() {
  const m = location.hash.match(/^#token=([^&]+)$/);
  if (!m) return;
  token.set(decodeURIComponent(m[1]));
  history.replaceState(null, '', location.pathname + location.search + '#/company');
}

takeSignInLink();
window.addEventListener('hashchange', route);
start();
