// Evals: the eval runs, newest first (status, dataset, change, pass rate,
// tokens), and one run's report at #/evals/RUN: per turn the recorded and
// the replayed answer side by side, each check's result, the tool calls
// that diverged, and the run's totals. Answers are model output, shown as
// text.

import { get, getSaying } from '../lib/api.js';
import { h, show, link, section, table, badge, when, usd, errorBox } from '../lib/dom.js';
import { action } from '../lib/lists.js';

export default async function evals(main, params, ctx) {
  const id = params[0];
  if (id) return detail(main, id, ctx);
  const listEl = h('div', { id: 'eval-runs' });
  show(main, h('h1', {}, 'Eval runs'), listEl);
  const runs = await get('/evals/runs');
  if (!ctx.isCurrent()) return null;
  show(listEl, table(['run', 'status', 'dataset', 'change', 'pass rate', 'tokens in/out', 'started'], runs.map((r) => [
    link(r.id, 'evals', r.id),
    status(r.status),
    r.dataset,
    change(r.change),
    passRate(r.totals),
    r.totals.input_tokens + '/' + r.totals.output_tokens,
    when(r.created_at),
  ]), 'No eval run yet: `crewlet eval run DATASET …` starts one.'));
  main.dataset.ready = 'evals';
  return null;
}

function status(s) {
  return badge(s, s === 'done' || s === 'scored' ? 'ok' : s === 'running' || s === 'pending' ? 'warn' : 'bad');
}

// change names what the run changed, as `crewlet eval runs` does.
function change(c) {
  const parts = [];
  if (c && c.charter) parts.push('charter');
  if (c && c.profile) parts.push('profile ' + c.profile);
  if (c && c.model) parts.push('model ' + c.model);
  if (c && c.revision) parts.push('revision ' + c.revision);
  return parts.length ? parts.join(', ') : h('span', { class: 'muted' }, 'nothing');
}

// money is what a run spent (its replays and judges, at the prices when
// they ran) and what the recorded turns it replayed cost, in dollars.
function money(t) {
  return usd(t.nano_usd) + ' (replays and judges); the recorded turns cost ' + usd(t.recorded_nano_usd) +
    (t.unpriced_tokens ? '; ' + t.unpriced_tokens + ' tokens unpriced' : '');
}

function passRate(t) {
  if (!t.scored) return h('span', { class: 'muted' }, '—');
  return (t.pass_rate * 100).toFixed(1) + '% (' + t.passed + ' of ' + t.scored + ')';
}

async function detail(main, id, ctx) {
  const el = h('div', { id: 'eval-run' });
  show(main, h('p', {}, link('← Eval runs', 'evals')), h('h1', {}, 'Eval run ', id), el);
  try {
    // The API answers as many turns as fit one answer and says so in a
    // header when it leaves some out.
    const { data: run, said: truncated } = await getSaying('/evals/runs/' + encodeURIComponent(id), 'X-Crewlet-Truncated');
    if (!ctx.isCurrent()) return null;
    const t = run.totals;
    show(el,
      h('dl', { class: 'facts' },
        h('dt', {}, 'status'), h('dd', {}, status(run.status)),
        h('dt', {}, 'dataset'), h('dd', {}, run.dataset),
        h('dt', {}, 'change'), h('dd', {}, change(run.change)),
        run.change && run.change.charter ? [h('dt', {}, 'charter'), h('dd', {}, h('pre', {}, run.change.charter))] : null,
        h('dt', {}, 'checks'), h('dd', {}, (run.checks || []).map((c, i) => [i ? ', ' : '', c.name || c.kind])),
        h('dt', {}, 'by'), h('dd', {}, run.principal),
        h('dt', {}, 'started'), h('dd', {}, when(run.created_at)),
        h('dt', {}, 'finished'), h('dd', {}, run.finished_at ? when(run.finished_at) : h('span', { class: 'muted' }, 'not yet'))),
      section('Totals', h('dl', { id: 'eval-totals', class: 'facts' },
        h('dt', {}, 'turns'), h('dd', {}, t.turns + ' (' + t.scored + ' scored, ' + t.passed + ' passed, ' + t.failed + ' failed to replay, ' + t.refused + ' refused, ' + t.pending + ' pending)'),
        h('dt', {}, 'pass rate'), h('dd', {}, passRate(t)),
        h('dt', {}, 'tool calls diverged'), h('dd', {}, String(t.diverged), ' (never run)'),
        h('dt', {}, 'tokens in/out'), h('dd', {}, t.input_tokens + '/' + t.output_tokens, ' (charged to evals.budget)'),
        h('dt', {}, 'cost'), h('dd', {}, money(t)))),
      section('Turns',
        truncated ? h('p', { class: 'muted' }, 'Shown: ', truncated, '.') : null,
        (run.results || []).length
          ? h('ol', { id: 'eval-turns', class: 'eval-turns' }, run.results.map((r) => turn(id, r)))
          : h('p', { class: 'muted' }, 'No turn in this run.')));
  } catch (err) {
    show(el, errorBox(err));
  }
  main.dataset.ready = 'eval-run';
  return null;
}

// turn is one turn's result of run id: its verdict and checks, its two
// answers side by side, and, when some tool calls diverged, a button that
// reads the turn's whole replay report and lists them.
function turn(id, r) {
  const verdict = r.status !== 'scored' ? status(r.status) : r.passed ? badge('pass', 'ok') : badge('fail', 'bad');
  return h('li', { class: 'eval-turn', 'data-turn': r.turn },
    h('div', { class: 'head' }, h('strong', {}, r.turn), ' ', verdict,
      ' ', h('span', { class: 'muted' }, r.input_tokens + '/' + r.output_tokens + ' tokens · ', r.diverged + (r.diverged === 1 ? ' tool call' : ' tool calls') + ' diverged')),
    r.error ? h('p', { class: 'error' }, r.error) : null,
    (r.checks || []).length ? h('ul', { class: 'checks' }, r.checks.map((c) => h('li', { 'data-check': c.check },
      c.check, ' ', c.pass ? badge('ok', 'ok') : badge('FAIL', 'bad'), c.reason ? [' ', h('span', { class: 'muted' }, c.reason)] : null))) : null,
    h('div', { class: 'answers' },
      h('div', { class: 'recorded' }, h('h3', {}, 'Recorded'), h('pre', {}, r.recorded_answer)),
      h('div', { class: 'replayed' }, h('h3', {}, 'Replayed'), h('pre', {}, r.replayed_answer))),
    r.diverged ? divergedCalls(id, r.turn) : null);
}

// divergedCalls is a button that lists the turn's replayed tool calls no
// recorded call matched: they were not run, and the model was told so.
function divergedCalls(id, turnID) {
  const listEl = h('ul', { class: 'diverged' });
  const button = action('Show the diverged calls', async () => {
    const run = await get('/evals/runs/' + encodeURIComponent(id) + '?turn=' + encodeURIComponent(turnID));
    const calls = [];
    for (const res of run.results || []) {
      for (const th of (res.report && res.report.threads) || []) {
        for (const round of th.rounds || []) {
          for (const c of round.calls || []) {
            if (c.outcome === 'diverged') calls.push(h('li', {}, 'round ' + round.round + ': ', h('code', { class: 'args' }, c.name, ' ', JSON.stringify(c.args))));
          }
        }
      }
    }
    show(listEl, calls.length ? calls : h('li', { class: 'muted' }, 'The report names no diverged call.'));
  }, { class: 'secondary', 'data-action': 'diverged' });
  return h('div', {}, button, listEl);
}
