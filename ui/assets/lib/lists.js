// Pieces the list pages share: a button or a small form that calls the API
// and says, next to itself, what the API answered when it refused; and a
// "more" button that reads the next page of a listing.

import { h, show, errorBox } from './dom.js';

// action is a button that runs run() once per click, disabled while it
// runs; a refusal shows the API's detail beside it (role=alert), so the
// reader learns why and what to do.
export function action(label, run, attrs) {
  const said = h('span', { class: 'said' });
  const button = h('button', Object.assign({ type: 'button' }, attrs, { on: { click: async () => {
    button.disabled = true;
    show(said);
    try {
      await run();
    } catch (err) {
      show(said, errorBox(err));
    } finally {
      button.disabled = false;
    }
  } } }), label);
  return h('span', { class: 'action' }, button, said);
}

// textAction is a labelled text field with its submit button: run(text)
// is called with the trimmed text; required refuses an empty one in the
// page, saying so beside the field (the API refuses it too). The browser's
// own required check is left off: its bubble is gone once it shows.
export function textAction(label, field, run, opts) {
  const o = opts || {};
  const id = 'f' + Math.random().toString(36).slice(2);
  const input = h(o.multiline ? 'textarea' : 'input', { id, type: o.multiline ? null : 'text', rows: o.multiline ? 2 : null, 'aria-required': o.required ? 'true' : null, placeholder: o.placeholder || null, autocomplete: 'off' });
  const said = h('div', { class: 'said' });
  const button = h('button', { type: 'submit', class: o.kind || null }, label);
  const form = h('form', { class: 'inline-form', on: { submit: async (e) => {
    e.preventDefault();
    const text = input.value.trim();
    show(said);
    if (o.required && !text) {
      show(said, errorBox(field + ' is required.'));
      input.focus();
      return;
    }
    button.disabled = true;
    try {
      await run(text);
      input.value = '';
    } catch (err) {
      show(said, errorBox(err));
    } finally {
      button.disabled = false;
    }
  } } }, h('label', { for: id }, field), input, button, said);
  return form;
}

// more is the button under a paged list: load() reads and draws the next
// page and returns whether there is another; the button goes once there
// is not.
export function more(label, load) {
  const said = h('span', { class: 'said' });
  const button = h('button', { type: 'button', class: 'secondary', on: { click: async () => {
    button.disabled = true;
    show(said);
    try {
      if (!(await load())) wrap.remove();
    } catch (err) {
      show(said, errorBox(err));
    } finally {
      button.disabled = false;
    }
  } } }, label);
  const wrap = h('p', { class: 'more' }, button, ' ', said);
  return wrap;
}
