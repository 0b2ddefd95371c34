// The live stream of turns as the reader sees it: one line per event
// (internal/events names the kinds), a round's model output growing as its
// deltas arrive. The seat page and the conversation page both show one.
// Every word in an event is the transcript's own, untrusted: it goes in as
// text through h().

import { h, show, link } from './dom.js';

// keep bounds the lines a log holds: a page left open on a busy seat
// drops its oldest lines rather than grow without end.
const keep = 500;

// eventLog renders events into el (emptied first) and returns
// add(event) for each event the stream gives, and note(node) for a line
// of the page's own (a message the reader sent).
export function eventLog(el, { showSeat } = {}) {
  show(el, h('p', { class: 'muted empty' }, 'Nothing yet: events appear here as the seat works.'));
  // outputs holds the element of each round's growing model output, by
  // turn, thread, round and attempt, so a delta appends to its own round
  // and the round's whole output replaces what the deltas built.
  const outputs = new Map();

  // Lines wait in pending until the events that came in one read of the
  // stream are all drawn: the page lays itself out once per batch, not
  // once per event, which is what lets it keep up with a busy seat.
  let pending = null;
  const put = (line) => {
    if (!pending) {
      pending = document.createDocumentFragment();
      queueMicrotask(flush);
    }
    pending.appendChild(line);
  };
  const flush = () => {
    const batch = pending;
    pending = null;
    el.querySelector('.empty')?.remove();
    const atEnd = el.scrollHeight - el.scrollTop - el.clientHeight < 40;
    el.appendChild(batch);
    for (let over = el.childElementCount - keep; over > 0; over--) {
      const first = el.firstElementChild;
      for (const [k, v] of outputs) if (first.contains(v)) outputs.delete(k);
      first.remove();
    }
    if (atEnd) el.scrollTop = el.scrollHeight;
  };

  const line = (ev, ...parts) => h('div', { class: 'event ' + ev.kind, 'data-kind': ev.kind, 'data-id': ev.id || '' },
    h('span', { class: 'muted' }, new Date(ev.time).toLocaleTimeString(), ' '),
    showSeat && ev.seat ? [link(ev.seat, 'seats', ev.seat), ' '] : null,
    ...parts);

  const words = (d, text) => (d.redacted ? h('span', { class: 'muted' }, '(words hidden: you may not read this seat’s transcript)') : text);

  function add(ev) {
    const d = ev.data || {};
    const key = [ev.turn, d.thread || 0, d.round || 0].join('|');
    switch (ev.kind) {
      case 'turn_started':
        put(line(ev, h('strong', {}, 'turn started'), ' with ', String(d.triggers || 0), ' message', d.triggers === 1 ? '' : 's',
          convLinks(d.conversations)));
        return;
      case 'round_started':
        put(line(ev, 'round ', String(d.round), d.thread ? ' of thread ' + d.thread : '', ' on ', d.profile || '—',
          d.tokens_so_far ? ' (' + d.tokens_so_far + ' tokens so far)' : ''));
        return;
      case 'model_delta': {
        const k = key + '|' + (d.attempt || 0);
        let out = outputs.get(k);
        if (!out) {
          out = h('span', { class: 'msg output' });
          outputs.set(k, out);
          put(line(ev, 'model: ', out));
        }
        out.appendChild(document.createTextNode(d.text || ''));
        return;
      }
      case 'model_output': {
        // The round's whole answer: it replaces what its deltas built (a
        // re-run attempt streams again), or stands alone for a provider
        // that does not stream.
        let out = null;
        for (const [k, v] of outputs) {
          if (k.startsWith(key + '|')) { out = v; outputs.delete(k); }
        }
        const tools = d.tools && d.tools.length ? h('span', { class: 'muted' }, ' → calls ', d.tools.join(', ')) : null;
        if (out) {
          show(out, words(d, d.text || ''));
          if (tools) out.after(tools);
        } else {
          put(line(ev, 'model: ', h('span', { class: 'msg output' }, words(d, d.text || '')), tools));
        }
        return;
      }
      case 'tool_started':
        put(line(ev, 'tool ', h('code', {}, d.tool || '?'), ' called',
          d.args ? [' with ', h('code', { class: 'args' }, words(d, JSON.stringify(d.args)))] : null));
        return;
      case 'tool_finished':
        put(line(ev, 'tool ', h('code', {}, d.tool || '?'), ' ', badgeText(d.outcome),
          d.result ? [': ', h('span', { class: 'msg result' }, words(d, d.result))] : d.redacted ? [' ', words(d, '')] : null));
        return;
      case 'approval_waiting':
        put(line(ev, h('strong', {}, 'waiting for approval'), ' of ', h('code', {}, d.tool || '?'),
          d.approvers && d.approvers.length ? ' from ' + d.approvers.join(', ') : '', d.approval ? ' (' + d.approval + ')' : ''));
        return;
      case 'approval_decided':
        put(line(ev, 'approval ', d.decision || '?', d.by ? ' by ' + d.by : '', d.reason ? ': ' + d.reason : ''));
        return;
      case 'ticket_opened':
        put(line(ev, 'delegated ticket ', d.ticket || '?', d.to ? ' to ' + d.to : '', d.phase ? ' (' + d.phase + ')' : ''));
        return;
      case 'ticket_settled':
        put(line(ev, 'ticket ', d.ticket || '?', ' ', d.phase || 'settled'));
        return;
      case 'answer_sent':
        put(line(ev, h('strong', {}, 'reply'), d.to ? ' to ' + d.to : '', ': ', h('span', { class: 'msg reply' }, words(d, d.text || '')),
          ev.conversation ? [' ', link('conversation', 'conversations', ev.conversation)] : null));
        return;
      case 'turn_finished':
        put(line(ev, h('strong', {}, 'turn ' + (d.status || 'finished')), d.rounds ? ' after ' + d.rounds + ' round' + (d.rounds === 1 ? '' : 's') : '',
          d.note ? ': ' + d.note : ''));
        return;
      default:
        put(line(ev, ev.kind));
    }
  }

  function note(...parts) {
    put(h('div', { class: 'event note', 'data-kind': 'sent' }, h('span', { class: 'muted' }, new Date().toLocaleTimeString(), ' '), ...parts));
  }

  return { add, note };
}

function badgeText(outcome) {
  return h('span', { class: 'badge ' + (outcome === 'ok' ? 'ok' : outcome === 'error' ? 'bad' : 'warn') }, outcome || '?');
}

function convLinks(ids) {
  if (!ids || !ids.length) return null;
  return [' in ', ids.map((c, i) => [i ? ', ' : '', link(c.slice(0, 8), 'conversations', c)])];
}
