// A live stream over fetch: EventSource cannot send the Authorization
// header, and the token must never ride in a URL. It resumes after the
// last event it saw (Last-Event-ID) whenever the connection drops, and
// says whether it is live.

import { headers } from './api.js';

// subscribe reads PATH's Server-Sent Events until close() is called:
// onEvent({id, event, data}) for each (data parsed as JSON when it is),
// onState('live' | 'connecting' | 'disconnected', detail) as the
// connection changes. One connection per call.
export function subscribe(path, { onEvent, onState }) {
  const ctl = new AbortController();
  let lastID = '';
  let closed = false;
  let wait = 500;
  const state = (s, d) => { if (!closed && onState) onState(s, d); };

  async function once() {
    const hs = headers({ Accept: 'text/event-stream' });
    if (lastID) hs['Last-Event-ID'] = lastID;
    const res = await fetch(path, { headers: hs, signal: ctl.signal, credentials: 'omit', cache: 'no-store' });
    if (!res.ok) {
      let detail = 'HTTP ' + res.status;
      try { detail = (await res.json()).detail || detail; } catch { /* the status says enough */ }
      const err = new Error(detail);
      err.status = res.status;
      throw err;
    }
    state('live');
    wait = 500;
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    let ev = { id: '', event: 'message', data: [] };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, '');
        buf = buf.slice(nl + 1);
        if (line === '') {
          if (ev.data.length) {
            if (ev.id) lastID = ev.id;
            const raw = ev.data.join('\n');
            let data = raw;
            try { data = JSON.parse(raw); } catch { /* not JSON: kept as text */ }
            onEvent({ id: ev.id, event: ev.event, data });
          }
          ev = { id: '', event: 'message', data: [] };
        } else if (!line.startsWith(':')) {
          const i = line.indexOf(':');
          const field = i < 0 ? line : line.slice(0, i);
          const val = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
          if (field === 'id') ev.id = val;
          else if (field === 'event') ev.event = val;
          else if (field === 'data') ev.data.push(val);
        }
      }
    }
  }

  (async () => {
    while (!closed) {
      state('connecting');
      try {
        await once();
        state('disconnected', 'the stream ended; reconnecting');
      } catch (err) {
        if (closed) return;
        if (err.status === 401 || err.status === 403 || err.status === 404) {
          state('disconnected', err.message);
          return;
        }
        state('disconnected', err.message + '; reconnecting');
      }
      await new Promise((r) => setTimeout(r, wait));
      wait = Math.min(wait * 2, 8000);
    }
  })();

  return { close() { closed = true; ctl.abort(); } };
}
